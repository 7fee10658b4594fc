"""Shared test settings: single-threaded numerics, offline hub, and the location of ../shared/data."""
import os
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("REWARD_AUDITOR_STORE", "off")  # tests see fresh perturbations; the store's own tests turn it on
from pathlib import Path
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("REWARD_AUDITOR_SHARED_DATA", REPO.parent / "shared" / "data"))


def shared_file(*parts):
    "Path to a file under ../shared/data, or skip the test with the reason."
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is absent: the shared real-data folder is not beside this checkout")
    return p


@pytest.fixture(autouse=True, scope="session")
def _single_thread_torch():
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
    yield
