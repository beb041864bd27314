"""A small real ext4 volume for the disk-full test: an image file mounted through a loop device.

A tmpfs is no stand-in here: the index memory-maps its files, and on tmpfs even reading a mapped
hole takes space, so the volume fills in ways a disk never would. Needs root and a loop device
(both present on these machines); without them the test fails saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()} (the disk-full test needs root and a loop device)")


@contextmanager
def ext4_volume(workdir: Path, size_mb: int) -> Iterator[Path]:
    """Mount a fresh ext4 file system of ``size_mb`` at ``workdir/mnt``; unmount and delete it afterwards."""
    image = workdir / "volume.img"
    mount_point = workdir / "mnt"
    mount_point.mkdir(parents=True)
    with image.open("wb") as handle:
        handle.truncate(size_mb * 2**20)
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
    _run("mount", "-o", "loop", str(image), str(mount_point))
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
        image.unlink(missing_ok=True)


def fill_until_free(volume: Path, free_bytes: int) -> Path:
    """Take the volume's space with one preallocated file until ``free_bytes`` are left; returns it."""
    filler = volume / "filler"
    take = shutil.disk_usage(volume).free - free_bytes
    if take > 0:
        _run("fallocate", "-l", str(take), str(filler))
    return filler
