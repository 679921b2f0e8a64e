dist_man_MANS += man/keylockd-protocol.7
