"""Every script in benchmarks/ runs, at tiny sizes, and prints its figures: none breaks unnoticed.

One line of ``SMOKES`` per script: its arguments (tiny sizes), regular expressions its output must
match (the figures, not the verdicts: a tiny run on a busy machine may miss a target), the exit
statuses accepted (some exit 1 when a target is missed) and its cost (``slow``: > 5 s; ``spark``: it
starts a JVM). ``test_every_benchmark_has_a_smoke_run`` fails for a script without a line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
NUM = r"\d[\d,]*(?:\.\d+)?"


@dataclass(frozen=True)
class Smoke:
    script: str
    args: tuple[str, ...]
    figures: tuple[str, ...]  # each must match somewhere in stdout
    slow: bool = True
    spark: bool = False
    exits: tuple[int, ...] = (0,)
    timeout: float = 900
    spark_line: str | None = None  # only under this Spark line (e.g. Comet: 4.1 only on Maven Central)


SMOKES = [
    Smoke(
        "catalog_load.py",
        ("--requests", "40", "--clients", "4", "--warmup", "5", "--creates", "10", "--snapshots", "2"),
        (
            rf"loadTable\s+1\s+40\s+{NUM}\s+{NUM}\s+{NUM}",
            r"loadTable\s+4\s+32\s",
            r"createTable\s+1 client: 10 creates",
        ),
        exits=(0, 1),
    ),
    Smoke(
        "catalog_peers.py",
        (
            "--requests",
            "40",
            "--clients",
            "4",
            "--warmup",
            "5",
            "--warm-requests",
            "40",
            "--committers",
            "3",
            "--commits",
            "4",
        ),
        (
            rf"loadTable p99 ms, 1 client\s+{NUM}\s+{NUM}\s+{NUM}",
            rf"loadTable req/s, 4 clients\s+{NUM}\s+{NUM}\s+{NUM}",
            rf"commit p50 ms, 3 writers one table\s+{NUM}\s+{NUM}\s+{NUM}",
            r"targets: req/s ratio at 4 clients",
        ),
    ),
    Smoke(
        "comet_scan.py",
        ("--rows", "20000", "--repeat", "1"),
        (rf"q1: Comet native {NUM} s, Spark JVM {NUM} s, ratio {NUM}", rf"geometric mean ratio: {NUM}"),
        spark=True,
        spark_line="4.1",
    ),
    Smoke(
        "load_under_attack.py",
        # one victim period (the default is two): each gate still prints every figure line, one row each
        ("--seconds", "1", "--period", "0.2", "--attackers", "2", "--attacker-processes", "1", "--grants", "5"),
        (
            rf"alone\s+\d+\s+{NUM}\s+{NUM}",
            rf"2 attackers\s+\d+\s+{NUM}\s+{NUM}",
            rf"attacked ÷ alone: p50 {NUM}x, p99 {NUM}x",
        ),
    ),
    Smoke(
        "device_store.py",
        ("--pending", "1000", "--calls", "500"),
        (rf"empty store\s+{NUM}/s", rf"at the bound, evicting\s+{NUM}/s", rf"ratio at-bound/empty: evicting {NUM}"),
        slow=False,
    ),
    Smoke(
        "embedded_start.py",
        ("--runs", "1"),
        (rf"CPU-s\s+median {NUM}", rf"wall s median {NUM}", r"load average at the end"),
    ),
    Smoke(
        "engine.py",
        ("--quick",),
        (
            rf"aggregate over 3000 rows: own Spark \(direct grant\) {NUM} s, engine \(DEFINER view\) {NUM} s, "
            rf"ratio {NUM}",
            rf"per-query overhead of the engine over own Spark: -?{NUM} ms \(median of the paired differences; .*"
            rf"best run against best run -?{NUM} ms",
            rf"own Spark: sql\(\) {NUM} s \+ collect\(\) {NUM} s = {NUM} s; engine: routing check {NUM} s",
            rf"2 concurrent users: 4 queries in {NUM} s, {NUM} queries/s, p50 {NUM} s, p95 {NUM} s",
            rf"reference, 2 threads on own Spark .* throughput ratio own/engine {NUM}",
        ),
        spark=True,
        spark_line="4.1",  # the engine is a Spark Connect service; its client needs pyspark[connect] 4.1
    ),
    Smoke(
        "fresh_credentials.py",
        ("--ttl", "12", "--ttls", "0.5", "--tables", "1"),
        (rf"upstream credential refreshes per TTL per table: {NUM}", rf"STS calls per 1,000 loads: {NUM}"),
        spark=True,
    ),
    Smoke("gateway_start.py", ("--runs", "1"), (rf'"import_ms": {NUM}', rf'"first_answer_ms": {NUM}'), slow=False),
    Smoke(
        "load.py",
        ("--seconds", "6", "--processes", "2", "--threads", "2", "--tables", "2", "--idle", "3"),
        (rf"loadTable\s+\d+\s+{NUM}\s+{NUM}", rf"STS calls per 1,000 credential loads: {NUM}", r"audit: \d+ of \d+"),
        exits=(0, 1),
    ),
    Smoke(
        "refresh.py",
        ("--seconds", "3", "--threads", "4", "--ttl", "3"),
        (rf"{NUM} refreshes over {NUM} lifetimes = {NUM} per expiry",),
    ),
    Smoke(
        "session_phases.py",
        ("--runs", "1", "--python", sys.executable),
        (r"Spark \S+ .*median of 1 cold run", rf"{NUM}\s+\(\s*{NUM} CPU-s\)", r"load average at the end"),
        spark=True,
    ),
    Smoke(
        "session_start.py",
        ("--runs", "1", "--quick", "--python", sys.executable),
        (
            rf"ratio lakesession/plain = {NUM}",
            rf"class cache off: {NUM}",
            rf"warm-ups off: {NUM} \(ratio warm-ups on/off = {NUM}\)",
            rf"first catalog query: plain {NUM}s, lakesession {NUM}s \(ratio {NUM}",
        ),
        spark=True,
    ),
    Smoke(
        "spark_read.py",
        ("--mb", "4", "--runs", "1"),
        (rf"ratio vended/standing throughput = {NUM}", rf"remote signing {NUM}s"),
        spark=True,
    ),
    Smoke(
        "vending.py",
        ("--snapshots", "200", "--loads", "40", "--read-mb", "2", "--read-rounds", "1"),
        (
            rf"vending cache hit\s+{NUM}\s+vending cache miss \(STS\)\s+{NUM}",
            rf"ratio /credentials ÷ loadTable = 1/{NUM}",
            r"STS calls per 1,000 loads of one table by one principal: \d+",
            rf"ratio remote signing / vended, same IO stack \(fsspec\) = {NUM}",
        ),
    ),
]


def run_benchmark(script: str, *args: str, timeout: float = 900, cwd: Path | None = None) -> tuple[int, str]:
    """``python benchmarks/SCRIPT ARGS`` from this tree; (exit status, stdout + stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd or ROOT,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _param(s: Smoke) -> object:
    marks = [pytest.mark.benchmark, *([pytest.mark.slow] if s.slow or s.spark else [])]
    if s.spark:
        marks.append(pytest.mark.spark)
    if s.spark_line is not None:
        import pyspark

        line = ".".join(pyspark.__version__.split(".")[:2])
        marks.append(pytest.mark.skipif(line != s.spark_line, reason=f"{s.script} needs Spark {s.spark_line}"))
    return pytest.param(s, id=s.script.removesuffix(".py"), marks=marks)


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    covered = {s.script for s in SMOKES}
    assert scripts - covered == set(), "add a Smoke(...) line for each new benchmark script"
    assert covered - scripts == set(), "a Smoke line names a script that is gone"


def test_every_name_a_benchmark_imports_from_the_project_exists() -> None:
    """The smoke runs are slow: a renamed helper (``tests._nessie._java_major``) broke one only in CI's last
    hour. Every ``from lakesession… / tests… import name`` in benchmarks/, function-level ones included, is
    resolved here in a second."""
    import ast
    import importlib

    missing: list[str] = []
    for script in sorted(BENCHMARKS.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in ("lakesession", "tests"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                is_package = hasattr(module, "__path__")
                if not hasattr(module, alias.name) and not (is_package and importlib.util.find_spec(name)):
                    missing.append(f"{script.name}:{node.lineno}: {name}")
    assert not missing, "benchmarks import names that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("smoke", [_param(s) for s in SMOKES])
def test_benchmark_prints_its_figures(smoke: Smoke, tmp_path: Path) -> None:
    code, out = run_benchmark(smoke.script, *smoke.args, timeout=smoke.timeout, cwd=tmp_path)
    assert code in smoke.exits, f"{smoke.script} exited {code}:\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]
    missing = [f for f in smoke.figures if not re.search(f, out)]
    assert not missing, f"{smoke.script} did not print {missing}:\n{out[-4000:]}"
