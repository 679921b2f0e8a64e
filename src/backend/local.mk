# The backend seam (backend.h) and its two backends: local (the table in
# this process) and etcd (the table replicated by etcd: the lease and the
# seam in backend_etcd.c, the replica, the group commit). backend.c picks
# one.
src_libkeylockd_a_SOURCES += \
	src/backend/backend.h src/backend/backend.c \
	src/backend/backend_local.c \
	src/backend/backend_etcd.c src/backend/backend_etcd.h \
	src/backend/backend_etcd_int.h \
	src/backend/backend_etcd_replica.c src/backend/backend_etcd_commit.c
