"""Tests of ``service/engine/store/``: the store contract every adapter keeps."""
