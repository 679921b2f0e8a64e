# /etc/keylockd/keylockd.conf: every setting, commented out at its default.
# An operator edits the installed copy, so `make install` never replaces an
# existing one (it says so instead), and `make uninstall` removes it only
# while it is still the file shipped here. Not a *_DATA primary for that
# reason; the file is listed in EXTRA_DIST.
keylockdconfdir = $(sysconfdir)/keylockd
EXTRA_DIST += etc/keylockd.conf

install-data-local: install-keylockd-conf
uninstall-local: uninstall-keylockd-conf

install-keylockd-conf:
	@$(NORMAL_INSTALL)
	$(MKDIR_P) '$(DESTDIR)$(keylockdconfdir)'
	@if test -f '$(DESTDIR)$(keylockdconfdir)/keylockd.conf'; then \
	  echo "keeping the existing $(DESTDIR)$(keylockdconfdir)/keylockd.conf"; \
	else \
	  echo " $(INSTALL_DATA) $(srcdir)/etc/keylockd.conf '$(DESTDIR)$(keylockdconfdir)'"; \
	  $(INSTALL_DATA) $(srcdir)/etc/keylockd.conf \
	    '$(DESTDIR)$(keylockdconfdir)/keylockd.conf'; \
	fi

uninstall-keylockd-conf:
	@$(NORMAL_UNINSTALL)
	@f='$(DESTDIR)$(keylockdconfdir)/keylockd.conf'; \
	if cmp -s $(srcdir)/etc/keylockd.conf "$$f"; then \
	  echo " rm -f '$$f'"; rm -f "$$f"; \
	elif test -f "$$f"; then \
	  echo "keeping $$f: it differs from the shipped file"; \
	fi; \
	rmdir '$(DESTDIR)$(keylockdconfdir)' 2>/dev/null || :
