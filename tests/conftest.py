"""Shared fixtures: the reference models, built once per test session into a temporary directory."""
from __future__ import annotations

import os

import pytest

# Tests patch the compiler and compare compiles: none may be answered from the compile cache (tests of the cache
# turn it on with their own directory).
os.environ["RELAYISH_CACHE"] = "0"
# Pipeline invariants are checked in every compile of the tests (compiler/passes/constants.py: no kernel reads only
# constants): a path that leaves constant work to run per call fails the test that takes it.
os.environ["RELAYISH_CHECK_INVARIANTS"] = "1"

from models import build_resnet18


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def resnet18_path(models_dir):
    """ResNet-18 with BatchNormalization nodes, batch 1 (models/resnet18.py, seed 0)."""
    return build_resnet18(models_dir / "resnet18.onnx")


@pytest.fixture(scope="session")
def resnet18_folded_path(models_dir):
    """The same network with every BatchNormalization folded into its conv (weights + bias)."""
    return build_resnet18(models_dir / "resnet18_folded.onnx", fold_bn=True)


@pytest.fixture(scope="session")
def resnet18_dynamic_path(models_dir):
    """ResNet-18 (with BN) whose batch dim is the symbolic "N"."""
    return build_resnet18(models_dir / "resnet18_dynamic.onnx", batch="N")
