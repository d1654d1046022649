"""The message for a missing object-storage package names a command that works where the
package was installed from (the package is not on PyPI, so `dataset-packer[s3]` alone finds
nothing), with the plain install of the extra's packages as the fallback."""

from __future__ import annotations

import json

import pytest

from dataset_packer import _cache


class _Dist:
    def __init__(self, record):
        self.record = record

    def read_text(self, name):
        assert name == "direct_url.json"
        return None if self.record is None else json.dumps(self.record)


@pytest.mark.parametrize("record, want", [
    ({"url": "file:///src/dataset-packer", "dir_info": {}},
     'pip install "/src/dataset-packer[s3]" (or: pip install obstore google-crc32c xxhash)'),
    ({"url": "file:///src/dp/python", "dir_info": {"editable": True}},
     'pip install -e "/src/dp/python[s3]" (or: pip install obstore google-crc32c xxhash)'),
    ({"url": "file:///w/dataset_packer-0.1.0-py3-none-any.whl", "archive_info": {}},
     'pip install "dataset-packer[s3] @ file:///w/dataset_packer-0.1.0-py3-none-any.whl" '
     "(or: pip install obstore google-crc32c xxhash)"),
    ({"url": "https://example.org/dp.whl", "archive_info": {}},
     "pip install obstore google-crc32c xxhash"),
    (None, "pip install obstore google-crc32c xxhash"),
])
def test_the_hint_follows_where_the_package_came_from(monkeypatch, record, want):
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Dist(record))
    assert _cache.install_hint() == want


def test_a_missing_module_is_named_with_the_hint(monkeypatch):
    import importlib.metadata
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: _Dist(None))
    with pytest.raises(_cache.PackError, match="no_such_module_xyz.*pip install obstore"):
        _cache._require("no_such_module_xyz")
