dist_man_MANS += man/keylockd-protocol.7
dist_man_MANS += man/keylockd.8 man/keylockd.conf.5
