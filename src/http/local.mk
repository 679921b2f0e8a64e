# The HTTP listener: /metrics and /stats (metrics.c) and the status page
# (status.c, status.html).
src_libkeylockd_a_SOURCES += \
	src/http/metrics.c src/http/metrics.h \
	src/http/status.c src/http/status.h \
	src/http/sha256.c src/http/sha256.h
nodist_src_libkeylockd_a_SOURCES += src/http/status_html.c

# The status page's HTML as a C array, made with od(1) and awk(1) alone so
# it builds out of tree and in distcheck; a NUL ends it (status.h).
EXTRA_DIST += src/http/status.html
CLEANFILES += src/http/status_html.c
src/http/status_html.c: src/http/status.html
	$(AM_V_GEN)$(MKDIR_P) src/http && { \
	echo '/* Generated from status.html by src/http/local.mk. */'; \
	echo '#include "status.h"'; \
	echo 'const unsigned char status_html[] = {'; \
	od -An -v -tu1 $(srcdir)/src/http/status.html | \
	    awk '{ for (i = 1; i <= NF; i++) printf "%s,", $$i; print "" }'; \
	echo '0 };'; \
	echo 'const size_t status_html_len = sizeof(status_html) - 1;'; \
	} >$@-t && mv $@-t $@
