# The etcd v3 client: the JSON gateway over evhttp (etcd.c), its watch
# streams (etcd_watch.c), the JSON it speaks (etcd_json.c) and https
# (etcd_tls.c), and the probes of members that calls are stuck on
# (etcd_probe.c). It knows nothing of locks; backend etcd is its one user.
src_libkeylockd_a_SOURCES += \
	src/etcd/etcd.c src/etcd/etcd.h src/etcd/etcd_impl.h \
	src/etcd/etcd_json.c src/etcd/etcd_watch.c src/etcd/etcd_tls.c \
	src/etcd/etcd_probe.c
