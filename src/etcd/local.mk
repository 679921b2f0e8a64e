# The etcd v3 client: the JSON gateway over evhttp (etcd.c), its watch
# streams (etcd_watch.c) and the JSON it speaks (etcd_json.c). It knows
# nothing of locks; backend etcd is its one user.
src_libkeylockd_a_SOURCES += \
	src/etcd/etcd.c src/etcd/etcd.h src/etcd/etcd_impl.h \
	src/etcd/etcd_json.c src/etcd/etcd_watch.c
