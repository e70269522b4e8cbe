#!/usr/bin/env python3
"""Runs one pytest file for ctest, or reports it skipped (exit 77) when what it needs is missing.

Usage: run.py [--requires torch,transformers] [--gpu] TEST_FILE [PYTEST_ARGS...]

ctest marks a test that exits 77 as skipped (SKIP_RETURN_CODE), never as passed: a GPU
test on a machine without a GPU, or a PyTorch test where torch is not installed, says
so instead of passing without having run.
"""
import argparse
import importlib
import os
import sys

SKIP = 77


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requires", default="", help="modules the tests import, comma-separated")
    parser.add_argument("--gpu", action="store_true", help="the tests need a CUDA GPU and GPU steps")
    parser.add_argument("test_file")
    args, pytest_args = parser.parse_known_args()

    for module in filter(None, args.requires.split(",")):
        try:
            importlib.import_module(module)
        except ImportError as error:
            print(f"skipped: {module} cannot be imported ({error})")
            return SKIP
    if args.gpu:
        import flash_steps

        if not flash_steps.gpu_steps():
            print("skipped: this build of flash_steps has no GPU steps")
            return SKIP
        if not flash_steps.gpu_available():
            print("skipped: no CUDA GPU")
            return SKIP
        if "torch" in sys.modules and not sys.modules["torch"].cuda.is_available():
            print("skipped: PyTorch sees no CUDA GPU")
            return SKIP
        if "torch" in sys.modules:
            try:
                import flash_steps.pytorch  # noqa: F401  (refuses a PyTorch older than it needs)
            except ImportError as error:
                print(f"skipped: {error}")
                return SKIP

    import pytest

    # -p no:cacheprovider: nothing written into the source tree; -rs: the reason of each skip.
    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider", os.path.abspath(args.test_file), *pytest_args])


if __name__ == "__main__":
    sys.exit(main())
