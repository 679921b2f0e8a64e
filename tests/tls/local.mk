TESTS += tests/tls/tls.sh
EXTRA_DIST += tests/tls/tls.sh
