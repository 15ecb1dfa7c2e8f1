"""The tidelog-jvm jar: built by javac into the cache, named by what it is built from, with the data source
registered for Spark's ServiceLoader; a missing JDK is a JarBuildError that says what to install."""

from __future__ import annotations

import zipfile

import pytest

from pipelines import spark_jvm


def test_the_jar_is_built_once_per_fingerprint_and_registers_the_source(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDELOG_CACHE_DIR", str(tmp_path))
    jar = spark_jvm.jar_path()
    assert jar.parent == tmp_path and jar.name == f"tidelog-spark-{spark_jvm.fingerprint()}.jar"
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
        assert "tidelog/spark/TidelogJvmSource.class" in names and "tidelog/spark/TopicWriter.class" in names
        assert z.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode().strip() == \
            "tidelog.spark.TidelogJvmSource"
    built = jar.stat().st_mtime_ns
    assert spark_jvm.jar_path() == jar and jar.stat().st_mtime_ns == built  # cached: not built again
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]  # no temporary file left beside it


def test_the_fingerprint_follows_the_sources(tmp_path, monkeypatch) -> None:
    before = spark_jvm.fingerprint()
    copy = tmp_path / "jvm"
    for p in spark_jvm._files():  # noqa: SLF001
        target = copy / p.relative_to(spark_jvm.SOURCES)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(p.read_bytes())
    monkeypatch.setattr(spark_jvm, "SOURCES", copy)
    assert spark_jvm.fingerprint() == before
    (copy / "src" / "tidelog" / "spark" / "Settings.java").write_text("// changed\n", encoding="utf-8")
    assert spark_jvm.fingerprint() != before


def test_without_javac_the_error_says_what_to_install(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TIDELOG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(spark_jvm.shutil, "which", lambda name: None)
    with pytest.raises(spark_jvm.JarBuildError, match="default-jdk-headless"):
        spark_jvm.build_jar(tmp_path / "x.jar")
