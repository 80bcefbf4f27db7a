"""MkDocs hook: fill the generated reference sections from the code, so the docs cannot drift from it.

A page asks for a section with a marker on a line of its own, ``<!-- generated: NAME -->``; the
build fails (it runs with ``--strict``) on a marker this hook does not know. Sections: the
settings and environment tables (``lakesession._settings``), the CLI's help (``lakesession.cli``),
the exception tree (``lakesession.errors``), the server's configuration keys
(``lakesession.reference.serveconfig``), the trusted engine's options (``lakesession.engine.EngineConfig``
and its command's parser) and its sandbox's rules (``lakesession/_wire/engine_rules.json``) and repository files shown as pages (CHANGELOG, results).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def cell_name(text: str) -> str:
    """A name in a table cell (variable, key, flag): a code span that never breaks mid-word (extra.css)."""
    return f'<span class="ls-name">`{text}`</span>'


def _settings() -> str:
    from lakesession._settings import Settings

    rows = ["| parameter | environment | config file | meaning |", "|---|---|---|---|"]
    group = None
    for f in dataclasses.fields(Settings):
        if not f.metadata:
            continue
        if f.metadata["group"] != group:
            group = f.metadata["group"]
            rows.append(f"| **{group}** | | | |")
        env = cell_name(f.metadata["env"]) if f.metadata["env"] else "—"
        rows.append(f"| {cell_name(f.name)} | {env} | {'✓' if f.metadata['file'] else '—'} | {f.metadata['doc']} |")
    return "\n".join(rows)


def _environment() -> str:
    from lakesession._settings import ENVIRONMENT

    rows = ["| variable | read by | option | meaning |", "|---|---|---|---|"]
    for v in sorted(ENVIRONMENT, key=lambda v: (v.side, v.name)):
        rows.append(f"| {cell_name(v.name)} | {v.side} | {cell_name(v.option) if v.option else '—'} | {v.doc} |")
    return "\n".join(rows)


def _engine_module(name: str) -> Any:
    """``lakesession.engine.<name>``: the engine imports gRPC (``pyspark[connect]``), which the docs need too."""
    import importlib

    try:
        return importlib.import_module(f"lakesession.engine.{name}")
    except ImportError as exc:
        raise RuntimeError(
            f"the trusted engine's reference pages need {exc.name} (pyspark[connect]): pip install -e '.[dev,docs]'"
        ) from exc


def _cli() -> str:
    from lakesession.cli import build_parser
    from lakesession.reference import servecmd

    parser = build_parser()
    out = ["```text", parser.format_help().rstrip(), "```"]
    # commands that parse their own flags: their own parser's help
    own = {
        "serve": servecmd.build_parser("lakesession serve"),
        "engine": _engine_module("_cli").build_parser("lakesession engine"),
    }
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                shown = own.get(name, sub)
                out += [f"\n### `lakesession {name}`\n", "```text", shown.format_help().rstrip(), "```"]
    out += [
        "\n### `lakesession-catalog`\n",
        "The same as `lakesession serve`, as its own console script (the container's entry point); "
        "installed with the full and the catalog distributions.",
    ]
    return "\n".join(out)


def _errors() -> str:
    from lakesession import errors

    doc = inspect.getdoc(errors) or ""
    tree = doc[doc.index("```") : doc.index("```", doc.index("```") + 3) + 3]
    out = [tree, ""]
    for name in errors.__all__:
        cls = getattr(errors, name)
        first = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        out.append(f"- **`{name}`** ({bases}): {first}")
    return "\n".join(out)


def error_tree() -> list[tuple[int, str]]:
    """``(depth, class name)`` of each class drawn in ``lakesession.errors``' docstring, in the drawing's order."""
    from lakesession import errors

    doc = inspect.getdoc(errors) or ""
    out = []
    for line in doc.splitlines():
        m = re.match(r"^((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\b", line)
        if m and m.group(2) in errors.__all__:
            out.append((len(m.group(1)) // 4 + (1 if "──" in line else 0), m.group(2)))
    return out


def _troubleshooting() -> str:
    import yaml

    return troubleshooting(yaml.safe_load((ROOT / "docs" / "_troubleshooting.yaml").read_text()))


def troubleshooting(entries: dict[str, Any]) -> str:
    """Each error of the tree: what it means (its docstring), its causes and the fix (``_troubleshooting.yaml``)."""
    from lakesession import errors

    tree = error_tree()
    names = [name for _, name in tree]
    missing = sorted(set(errors.__all__) - set(entries))
    unknown = sorted(set(entries) - set(errors.__all__))
    if missing or unknown or set(names) != set(errors.__all__):  # a new error must say its causes and fix
        raise ValueError(f"docs/_troubleshooting.yaml: no entry for {missing}, entries naming no error {unknown}")
    peers = (ROOT / "docs" / "reference" / "errors.md").read_text()
    out = []
    for _, name in tree:
        cls = getattr(errors, name)
        entry = entries[name]
        meaning = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        bases = " → ".join(f"`{c.__name__}`" for c in reversed(cls.__mro__[1:]) if c.__name__ in errors.__all__)
        out += [f"### `{name}`", "", meaning + (f" Under {bases}." if bases else "")]
        out += ["", "**Causes**", ""] + [f"- {cause}" for cause in entry["causes"]]
        out += ["", f"**Fix**: {entry['fix']}"]
        if f"| `{name}`" in peers:
            out.append(
                "How Python and Spark raise it, and which peers are checked: "
                "[Errors](errors.md#causes-covered-and-the-peers-checked)."
            )
        out.append("")
    return "\n".join(out)


PROCESS_KEYS = {
    "host": "Address to bind (`--host`).",
    "port": "Port to bind (`--port`).",
    "workers": "Server processes accepting on one port (PostgreSQL only).",
    "data_dir": "Issuer key, admin secret, SQLite database, emulator objects (0700).",
    "s3_emulator": "Serve an embedded S3/STS emulator as the store (development; needs an `s3://` warehouse).",
    "s3_emulator_port": "Fixed port for the emulator (default: any free one).",
    "credential_ttl": "Lifetime of vended storage credentials, seconds (default 3600).",
    "bootstrap": "The policy: principals, roles, grants (inline mapping or a file path).",
}


def _attribute_docs(cls: type) -> dict[str, str]:
    """``Attributes:`` entries of a Google-style docstring, joined to one line each."""
    doc = inspect.getdoc(cls) or ""
    body = doc.split("Attributes:", 1)[-1]
    out: dict[str, str] = {}
    name = None
    for line in body.splitlines():
        m = re.match(r"^    (\w+): (.*)$", line)
        if m:
            name = m.group(1)
            out[name] = m.group(2)
        elif name and line.startswith("        "):
            out[name] += " " + line.strip()
    return out


def _serve_config() -> str:
    from lakesession.reference.serveconfig import ServeConfig
    from lakesession.reference.settings import ServerSettings

    docs = {**_attribute_docs(ServerSettings), **PROCESS_KEYS}
    undocumented = sorted(set(ServeConfig.model_fields) - set(docs))
    if undocumented:  # a new key must say what it does (ServerSettings' docstring, or PROCESS_KEYS here)
        raise ValueError(f"server configuration keys without documentation: {', '.join(undocumented)}")
    rows = ["| key | meaning |", "|---|---|"]
    for key in sorted(ServeConfig.model_fields):
        meaning = docs.get(key, "").replace("|", "\\|")
        rows.append(f"| {cell_name(key)} | {meaning} |")
    return "\n".join(rows)


#: ``lakesession engine`` flags that set no ``EngineConfig`` field of their own name
ENGINE_FLAG_FIELDS = {"conf": "spark_conf", "config": None, "print_ready": None}


def _engine_config() -> str:
    """``EngineConfig``'s fields: YAML key, flag, variable, default, meaning; then the default allow-lists."""
    config = _engine_module("_config")
    cli = _engine_module("_cli")
    fields = {f.name: f for f in dataclasses.fields(config.EngineConfig)}
    undocumented = sorted(n for n, f in fields.items() if not f.metadata.get("doc"))
    if undocumented:  # a new option must say what it does (its field's metadata)
        raise ValueError(f"engine options without documentation: {', '.join(undocumented)}")
    flags: dict[str, list[str]] = {}
    for action in cli.build_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        target = ENGINE_FLAG_FIELDS.get(action.dest, action.dest)
        if target is None:
            continue
        if target not in fields:  # a flag the docs could not place: the generator must learn it
            raise ValueError(f"lakesession engine flag {action.option_strings[0]} sets no EngineConfig field")
        repeat = " …" if isinstance(action, argparse._AppendAction) else ""
        flags.setdefault(target, []).append(
            cell_name(f"{action.option_strings[0]}{' KEY=VALUE' if target == 'spark_conf' else ''}") + repeat
        )
    variables = {var for var, _ in config.ENGINE_ENVIRONMENT}
    rows = ["| key | flag | variable | default | meaning |", "|---|---|---|---|---|"]
    long_defaults: list[tuple[str, list[str]]] = []
    for key, f in fields.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, (list, tuple)) and len(default) > 3:
            long_defaults.append((key, list(default)))
            shown = f"{len(default)} entries, below"
        elif isinstance(default, (list, tuple)):
            shown = ", ".join(f"`{d}`" for d in default) or "—"
        elif isinstance(default, dict):
            shown = "—" if not default else ", ".join(f"`{k}={v}`" for k, v in default.items())
        elif default is None:
            shown = "—"
        else:
            shown = f"`{str(default).lower() if isinstance(default, bool) else default}`"
        env = f.metadata.get("env") or (
            f"LAKESESSION_ENGINE_{key.upper()}" if f"LAKESESSION_ENGINE_{key.upper()}" in variables else None
        )
        meaning = f.metadata["doc"].replace("|", "\\|")
        rows.append(
            f"| {cell_name(key)} | {', '.join(flags.get(key, [])) or '—'} | {cell_name(env) if env else '—'} | {shown} | {meaning} |"
        )
    out = ["\n".join(rows)]
    for key, values in long_defaults:
        out.append(f"\nDefault `{key}`: " + ", ".join(f"`{v}`" for v in values) + ".")
    return "\n".join(out)


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


# what each Maven jar is for (a jar added to versions.py/comet.py without a line here fails the build)
JAR_PURPOSE = {
    "iceberg-spark-runtime": "Iceberg's Spark catalog, REST client and FileIOs (S3, ADLS, GCS)",
    "iceberg-aws-bundle": "the AWS SDK v2 that `S3FileIO` calls (relocated)",
    "iceberg-azure-bundle": "the Azure SDK that `ADLSFileIO` calls",
    "iceberg-gcp-bundle": "the Google Cloud SDK that `GCSFileIO` calls",
    "comet-spark": "Comet's plugin, shuffle manager and native library (linux amd64 and aarch64)",
    "hadoop-aws": "S3A for raw `s3a://` paths (matches pyspark's Hadoop)",
    "apache-client": "an AWS SDK v2 module S3A needs beyond those in `iceberg-aws-bundle` (no 600 MB SDK `bundle`)",
    "s3-transfer-manager": "the other AWS SDK v2 module S3A needs",
}


def _purpose(artifact: str) -> str:
    for prefix, text in JAR_PURPOSE.items():
        if artifact.startswith(prefix):
            return text
    raise ValueError(f"docs/_gen.py: no JAR_PURPOSE entry for the Maven jar {artifact}")


def _jar_rows(coords: list[tuple[str, str, str]]) -> list[str]:
    from lakesession._spark.versions import JAR_BYTES

    return [f"| `{a}-{v}.jar` | {_size(JAR_BYTES[(g, a, v)])} | {_purpose(a)} |" for g, a, v in coords]


def _spark_jars() -> str:
    """Per Spark line, the jars every start needs (sizes from ``versions.JAR_BYTES``), then the cloud bundles."""
    from lakesession._spark import versions as V

    rows = ["| pyspark | Scala | jars (Maven Central) | download |", "|---|---|---|---|"]
    for minor, by_scala in V.MAVEN_ICEBERG.items():
        for scala in by_scala:
            coords = [(V.GROUP, a, v) for a, v in V.maven_artifacts(minor, scala)]
            names = ", ".join(f"`{a}-{v}` ({_size(V.JAR_BYTES[(g, a, v)])})" for g, a, v in coords)
            total = sum(V.JAR_BYTES[c] for c in coords)
            rows.append(f"| {minor}.x | {scala} | {names} | {_size(total)} |")
    rows += [
        "",
        "Only for storage on that cloud (any Spark line):",
        "",
        "| cloud | jar | size | for |",
        "|---|---|---|---|",
    ]
    for cloud, (a, v) in V.CLOUD_BUNDLES.items():
        rows.append(f"| `{cloud}` | `{a}-{v}.jar` | {_size(V.JAR_BYTES[(V.GROUP, a, v)])} | {_purpose(a)} |")
    return "\n".join(rows)


def _comet_jars() -> str:
    """What ``comet=True`` downloads on each Spark line with a Comet release: ``comet.resolve``'s list, sized."""
    from lakesession._spark import comet
    from lakesession._spark import versions as V

    out = []
    for minor, by_scala in comet.MAVEN_COMET.items():
        for scala, release in by_scala.items():
            sdk = comet.SDK_FOR_ICEBERG[V.MAVEN_ICEBERG[minor][scala]]
            coords = [
                ("org.apache.datafusion", f"comet-spark-spark{minor}_{scala}", release),
                ("org.apache.hadoop", "hadoop-aws", comet.HADOOP_FOR_SPARK[minor]),
                ("software.amazon.awssdk", "apache-client", sdk),
                ("software.amazon.awssdk", "s3-transfer-manager", sdk),
            ]
            iceberg = [(V.GROUP, a, v) for a, v in V.maven_artifacts(minor, scala)]
            own = sum(V.JAR_BYTES[c] for c in coords)
            total = own + sum(V.JAR_BYTES[c] for c in iceberg)
            out += [
                f"Spark {minor} (Scala {scala}), Comet {release}: {_size(own)} beyond the Iceberg jars every start "
                f"needs, {_size(total)} in all on a first start (S3 only).",
                "",
                "| jar | size | for |",
                "|---|---|---|",
                *_jar_rows(coords),
                *_jar_rows(iceberg),
                "",
            ]
    return "\n".join(out).rstrip()


def _spark_versions() -> str:
    from lakesession._spark import versions as V

    rows = ["| pyspark | Scala | Iceberg (Maven Central) | offline assembly (no Maven) |", "|---|---|---|---|"]
    for minor, by_scala in sorted(
        V.MAVEN_ICEBERG.items(), key=lambda kv: tuple(map(int, kv[0].split("."))), reverse=True
    ):
        for scala, iceberg in by_scala.items():
            default = " (default)" if minor == V.DEFAULT_SPARK else ""
            offline = f"Iceberg {V.OFFLINE_ICEBERG}" if minor in V.OFFLINE_SPARK else "—"
            rows.append(f"| {minor}.x{default} | {scala} | {iceberg} | {offline} |")
    return "\n".join(rows)


def _engine_rules() -> str:
    """The trusted engine's rule table, rendered from its rulebook (``lakesession/_wire/engine_rules.json``).

    The front door and the JVM's checks read the same file (the jar carries a byte-equal copy)."""
    from lakesession._wire.enginerules import BOOK

    rows = ["| rule | refused, for example | why |", "|---|---|---|"]
    for rule in BOOK["rules"]:
        rows.append(f"| `{rule['id']}` | {rule['examples']} | {rule['why']} |")
    return "\n".join(rows)


def _file(name: str) -> Any:
    def read() -> str:
        text = (ROOT / name).read_text()
        return text.split("\n", 1)[1] if text.startswith("# ") else text  # the page has its own title

    return read


SECTIONS = {
    "settings": _settings,
    "environment": _environment,
    "cli": _cli,
    "errors": _errors,
    "troubleshooting": _troubleshooting,
    "serve-config": _serve_config,
    "engine-config": _engine_config,
    "engine-rules": _engine_rules,
    "spark-jars": _spark_jars,
    "comet-jars": _comet_jars,
    "spark-versions": _spark_versions,
    "changelog": _file("CHANGELOG.md"),
    "contributing": _file("CONTRIBUTING.md"),
    "benchmark-results": _file("benchmarks/RESULTS.md"),
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in SECTIONS:
            raise ValueError(f"unknown generated section {name!r} (known: {', '.join(sorted(SECTIONS))})")
        return SECTIONS[name]()

    return MARKER.sub(fill, markdown)
