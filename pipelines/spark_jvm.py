"""The ``tidelog-jvm`` Spark reader and writer's jar: built from ``pipelines/jvm`` by the JDK's ``javac`` against
the installed PySpark's jars, once per change of its sources or of PySpark, and cached.

``format("tidelog-jvm")`` reads and writes topics in the JVM through the brokers' Kafka listener (plaintext or
secure), so the rows never pass through a Python worker: that hand-over is what bounds the ``tidelog`` Python
data source and sink (see the README's Spark section).
``pipelines.spark.local_session`` puts the jar on Spark's classpath.

    python -m pipelines.spark_jvm          # build (if needed) and print the jar's path
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

SOURCES = Path(__file__).resolve().parent / "jvm"
JAVA_RELEASE = "17"


class JarBuildError(RuntimeError):
    """javac is missing or refused the sources."""


def cache_dir() -> Path:
    """``TIDELOG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tidelog``, else ``~/.cache/tidelog``."""
    base = os.environ.get("TIDELOG_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidelog"


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file())


def fingerprint() -> str:
    """What the jar is built from: its sources, PySpark's version and the Java release."""
    import pyspark

    h = hashlib.sha256(f"{pyspark.__version__}|{JAVA_RELEASE}".encode())
    for p in _files():
        h.update(str(p.relative_to(SOURCES)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def jar_path(build: bool = True) -> Path:
    """The jar for these sources and this PySpark, built first when missing (``build``)."""
    jar = cache_dir() / f"tidelog-spark-{fingerprint()}.jar"
    if not jar.exists() and build:
        build_jar(jar)
    return jar


def build_jar(jar: Path) -> Path:
    """Compile the sources and write ``jar`` atomically (concurrent builders each write their own temp file)."""
    javac = shutil.which("javac")
    if javac is None:
        raise JarBuildError("javac not found: the tidelog-jvm reader and writer need a JDK (Debian: "
                            "default-jdk-headless; scripts/setup.sh installs it)")
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidelog-jvm-") as tmp:
        classes = Path(tmp) / "classes"
        java = [str(p) for p in _files() if p.suffix == ".java"]
        cmd = [javac, "--release", JAVA_RELEASE, "-nowarn", "-cp", str(_spark_jars() / "*"), "-d", str(classes),
               *java]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise JarBuildError(f"javac failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        fd, part = tempfile.mkstemp(prefix=jar.name, suffix=".part", dir=jar.parent)
        os.close(fd)
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: tidelog\n")
            for p in sorted(classes.rglob("*.class")):
                z.write(p, p.relative_to(classes).as_posix())
            resources = SOURCES / "resources"
            for p in sorted(resources.rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(resources).as_posix())
        os.replace(part, jar)
    log.info("built %s", jar)
    return jar


def main() -> None:
    try:
        print(jar_path())
    except JarBuildError as exc:
        raise SystemExit(str(exc)) from exc


if __name__ == "__main__":
    sys.exit(main())
