"""Small real workspace trees for the code search tests: several languages, docs, tests, a binary
file, skipped directories and a .gitignore."""

from __future__ import annotations

import os
import shutil
import sysconfig
from pathlib import Path

AUTH_PY = '''"""Authentication helpers."""

import hashlib


def hash_password(password: str, salt: str) -> str:
    """Hash a password with a salt."""
    return hashlib.sha256((salt + password).encode()).hexdigest()


class SessionStore:
    """Keeps user sessions in memory."""

    def __init__(self):
        self.sessions = {}

    def create_session(self, user_id):
        token = hash_password(str(user_id), "session")
        self.sessions[token] = user_id
        return token

    def drop_session(self, token):
        self.sessions.pop(token, None)
'''

BILLING_PY = '''"""Invoices and payments."""


def compute_invoice_total(lines, tax_rate):
    """Sum the invoice lines and add tax."""
    subtotal = sum(line.amount for line in lines)
    return round(subtotal * (1 + tax_rate), 2)


def refund_payment(payment_id, reason):
    """Give the customer their money back."""
    return {"payment": payment_id, "reason": reason, "status": "refunded"}
'''

SERVER_GO = """package main

import "net/http"

// handleLogin checks credentials and starts a session.
func handleLogin(w http.ResponseWriter, r *http.Request) {
\tuser := r.FormValue("user")
\tif user == "" {
\t\thttp.Error(w, "missing user", http.StatusBadRequest)
\t\treturn
\t}
\tw.WriteHeader(http.StatusOK)
}

// parseRetryAfter reads the Retry-After header in seconds.
func parseRetryAfter(r *http.Request) int {
\treturn 0
}
"""

CLIENT_TS = """export interface RetryPolicy {
  attempts: number;
  backoffMs: number;
}

// fetchWithRetry retries a request with exponential backoff.
export async function fetchWithRetry(url: string, policy: RetryPolicy): Promise<Response> {
  let delay = policy.backoffMs;
  for (let attempt = 0; attempt < policy.attempts; attempt++) {
    try {
      return await fetch(url);
    } catch (err) {
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay *= 2;
    }
  }
  throw new Error("retries exhausted");
}
"""

LIB_RS = """/// A bounded queue of jobs.
pub struct JobQueue {
    items: Vec<String>,
    capacity: usize,
}

impl JobQueue {
    /// Push a job, refusing it when the queue is full.
    pub fn push(&mut self, job: String) -> Result<(), String> {
        if self.items.len() >= self.capacity {
            return Err("queue full".to_string());
        }
        self.items.push(job);
        Ok(())
    }
}
"""

TEST_AUTH_PY = '''from pkg.auth import hash_password


def test_hash_password_depends_on_salt():
    assert hash_password("a", "b") != hash_password("a", "c")
'''

GUIDE_MD = """# Guide

How to hash a password and create a session for a user.
"""


def write_tree(root: Path) -> Path:
    """A small multi-language workspace; returns ``root``."""
    files = {
        "src/pkg/auth.py": AUTH_PY,
        "src/pkg/billing.py": BILLING_PY,
        "src/server.go": SERVER_GO,
        "web/client.ts": CLIENT_TS,
        "crates/queue/src/lib.rs": LIB_RS,
        "tests/test_auth.py": TEST_AUTH_PY,
        "docs/guide.md": GUIDE_MD,
        # skipped: default skip dirs, an extra skip dir, gitignored files
        "node_modules/left-pad/index.js": "module.exports = function leftPad() {}\n",
        "vendor/lib/vendored.go": "package lib\nfunc Vendored() {}\n",
        "coverage/report.txt": "hash_password 100%\n",
        "build/out.py": "def hash_password(): pass\n",
        "debug.log": "hash_password called\n",
        ".gitignore": "*.log\nbuild/\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "src" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return root


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def copy_stdlib_packages(target: Path, packages: tuple[str, ...] = ("json", "email", "asyncio")) -> Path:
    """A workspace made of some standard library packages (real code at a moderate scale)."""
    source = stdlib_root()
    for package in packages:
        shutil.copytree(source / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def touch(path: Path, seconds_later: float = 2.0) -> None:
    """Move a file's mtime forward without changing its content."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + int(seconds_later * 1e9)))


def edit(path: Path, old: str, new: str) -> None:
    """Replace text in a file and make sure its mtime moves (coarse clocks)."""
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))
    touch(path, 1.0)
