import os
import pathlib

import pytest

SOURCE = pathlib.Path(os.environ.get("TESSERA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE
