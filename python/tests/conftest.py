"""Shared by the Python tests: random inputs from a seed that is printed, as in the C++ tests."""
import os
import random
import zlib

import numpy as np
import pytest


def _run_seed():
    """FLASH_TEST_SEED if set, else a fresh seed (printed with every failure by the fixture)."""
    return int(os.environ.get("FLASH_TEST_SEED", random.SystemRandom().randrange(2**32)))


SEED = _run_seed()


def pytest_report_header(config):
    return f"FLASH_TEST_SEED={SEED} (set it to repeat this run's inputs)"


@pytest.fixture
def rng(request):
    """A NumPy generator seeded from the run's seed and the test's name."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.name.encode())])


def random_qkv(rng, b, h, n_q, n_kv, d, magnitude=1.0):
    """Q [b, h, n_q, d], K and V [b, h, n_kv, d], float32, standard normal times magnitude."""
    q = (rng.standard_normal((b, h, n_q, d)) * magnitude).astype(np.float32)
    k = (rng.standard_normal((b, h, n_kv, d)) * magnitude).astype(np.float32)
    v = rng.standard_normal((b, h, n_kv, d)).astype(np.float32)
    return q, k, v
