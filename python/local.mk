# The Python package (python/): `pip install ./python`, or import it from
# the checkout. make check runs its pytest suite against this build's
# daemon and mypy --strict over it (python/run-tests.sh).
TESTS += python/run-tests.sh
PYTHON_PACKAGE = \
	python/pyproject.toml python/README.md python/local.mk \
	python/keylock/__init__.py python/keylock/aio.py \
	python/keylock/_core.py python/keylock/_errors.py \
	python/keylock/_fork.py python/keylock/_sync.py \
	python/keylock/_wire.py python/keylock/py.typed
PYTHON_TESTS = \
	python/tests/conftest.py python/tests/worker.py \
	python/tests/test_wire.py python/tests/test_locks.py \
	python/tests/test_lost.py python/tests/test_fork.py \
	python/tests/test_seed.py python/tests/test_package.py \
	python/tests/test_cancel.py python/tests/test_failover.py \
	python/tests/test_failover_etcd.py \
	python/tests/test_session.py python/tests/test_channels.py \
	python/tests/test_upgrade.py python/tests/test_hostile.py \
	python/tests/test_deadline.py
EXTRA_DIST += python/run-tests.sh $(PYTHON_PACKAGE) $(PYTHON_TESTS)

# The side-by-side benchmark against redis-py (not run by make check).
EXTRA_DIST += bench/python_compare.py
