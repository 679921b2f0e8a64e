# filled in by the clients issue
