"""The store's schema as an ordered list of migrations; the index+1 is the schema version.

Add a migration at the end, never edit one that has shipped: stores in the field are at
every version in between and are brought forward one step at a time.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: runs, their environments, probe results, raw measurements, artifacts.
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        finished_at REAL,
        status TEXT NOT NULL,              -- running, finished, interrupted, failed
        plan_json TEXT NOT NULL,
        decision TEXT,                     -- go, no-go
        decision_json TEXT
    );
    CREATE TABLE environments (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        role TEXT NOT NULL,                -- baseline, candidate
        spec TEXT NOT NULL,
        python TEXT NOT NULL,
        torch_version TEXT NOT NULL,
        build_seconds REAL NOT NULL,
        reused INTEGER NOT NULL,
        manifest_json TEXT NOT NULL,
        PRIMARY KEY (run_id, role)
    );
    CREATE TABLE probe_results (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        env_role TEXT NOT NULL,
        probe_id TEXT NOT NULL,
        verdict TEXT NOT NULL,
        summary TEXT NOT NULL,
        evidence_json TEXT NOT NULL,
        duration_s REAL NOT NULL,
        started_at REAL NOT NULL,
        PRIMARY KEY (run_id, env_role, probe_id)
    );
    CREATE TABLE measurements (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        env_role TEXT NOT NULL,
        source TEXT NOT NULL,              -- probe id, benchmark id, drill id
        series TEXT NOT NULL,
        values_json TEXT NOT NULL,
        PRIMARY KEY (run_id, env_role, source, series)
    );
    CREATE TABLE artifacts (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        name TEXT NOT NULL,
        media_type TEXT NOT NULL,
        content BLOB NOT NULL,
        PRIMARY KEY (run_id, name)
    );
    """,
    # 2: the other pillars' results. Each row is one finished unit of work (a benchmark
    # comparison, a drill, a stack run), keyed so --resume can skip it.
    """
    CREATE TABLE section_results (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        section TEXT NOT NULL,             -- bench, drill, stack
        key TEXT NOT NULL,
        env_role TEXT NOT NULL,            -- baseline, candidate, or 'both' for comparisons
        verdict TEXT NOT NULL,
        payload_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (run_id, section, key, env_role)
    );
    """,
    # 3: indexes for questions across runs (`torchcanary history`): one item's results in
    # every run, and runs by date. The primary keys start with run_id, so without these a
    # history reads every result ever stored.
    """
    CREATE INDEX probe_results_by_probe ON probe_results (probe_id);
    CREATE INDEX section_results_by_key ON section_results (section, key);
    CREATE INDEX runs_by_date ON runs (created_at);
    """,
    # 4: the fleet. Every result says which node ran it and under which hardware profile,
    # and the profile is part of each key: one run holds a result per profile. A run on
    # one machine stores '' for both. Tables are rebuilt because a primary key cannot be
    # altered in SQLite; rows keep their values and get node = profile = ''.
    """
    CREATE TABLE environments_v4 (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        role TEXT NOT NULL,
        spec TEXT NOT NULL,
        python TEXT NOT NULL,
        torch_version TEXT NOT NULL,
        build_seconds REAL NOT NULL,
        reused INTEGER NOT NULL,
        manifest_json TEXT NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        profile TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, profile, role)
    );
    INSERT INTO environments_v4 SELECT run_id, role, spec, python, torch_version,
        build_seconds, reused, manifest_json, '', '' FROM environments;
    DROP TABLE environments;
    ALTER TABLE environments_v4 RENAME TO environments;
    CREATE TABLE probe_results_v4 (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        env_role TEXT NOT NULL,
        probe_id TEXT NOT NULL,
        verdict TEXT NOT NULL,
        summary TEXT NOT NULL,
        evidence_json TEXT NOT NULL,
        duration_s REAL NOT NULL,
        started_at REAL NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        profile TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, profile, env_role, probe_id)
    );
    INSERT INTO probe_results_v4 SELECT run_id, env_role, probe_id, verdict, summary,
        evidence_json, duration_s, started_at, '', '' FROM probe_results;
    DROP TABLE probe_results;
    ALTER TABLE probe_results_v4 RENAME TO probe_results;
    CREATE INDEX probe_results_by_probe ON probe_results (probe_id);
    CREATE TABLE measurements_v4 (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        env_role TEXT NOT NULL,
        source TEXT NOT NULL,
        series TEXT NOT NULL,
        values_json TEXT NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        profile TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, profile, env_role, source, series)
    );
    INSERT INTO measurements_v4 SELECT run_id, env_role, source, series, values_json, '', ''
        FROM measurements;
    DROP TABLE measurements;
    ALTER TABLE measurements_v4 RENAME TO measurements;
    CREATE TABLE artifacts_v4 (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        name TEXT NOT NULL,
        media_type TEXT NOT NULL,
        content BLOB NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        profile TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, profile, name)
    );
    INSERT INTO artifacts_v4 SELECT run_id, name, media_type, content, '', '' FROM artifacts;
    DROP TABLE artifacts;
    ALTER TABLE artifacts_v4 RENAME TO artifacts;
    CREATE TABLE section_results_v4 (
        run_id TEXT NOT NULL REFERENCES runs(run_id),
        section TEXT NOT NULL,
        key TEXT NOT NULL,
        env_role TEXT NOT NULL,
        verdict TEXT NOT NULL,
        payload_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        node TEXT NOT NULL DEFAULT '',
        profile TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, profile, section, key, env_role)
    );
    INSERT INTO section_results_v4 SELECT run_id, section, key, env_role, verdict,
        payload_json, created_at, '', '' FROM section_results;
    DROP TABLE section_results;
    ALTER TABLE section_results_v4 RENAME TO section_results;
    CREATE INDEX section_results_by_key ON section_results (section, key);
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)

# Every table of the latest schema: its columns in order and its primary key. `store copy`
# moves rows column by column; PostgreSQL needs the keys to say what an upsert replaces.
PRIMARY_KEYS = {
    "runs": ("run_id",),
    "environments": ("run_id", "profile", "role"),
    "probe_results": ("run_id", "profile", "env_role", "probe_id"),
    "measurements": ("run_id", "profile", "env_role", "source", "series"),
    "artifacts": ("run_id", "profile", "name"),
    "section_results": ("run_id", "profile", "section", "key", "env_role"),
}
TABLE_COLUMNS = {
    "runs": (
        "run_id",
        "created_at",
        "finished_at",
        "status",
        "plan_json",
        "decision",
        "decision_json",
    ),
    "environments": (
        "run_id",
        "role",
        "spec",
        "python",
        "torch_version",
        "build_seconds",
        "reused",
        "manifest_json",
        "node",
        "profile",
    ),
    "probe_results": (
        "run_id",
        "env_role",
        "probe_id",
        "verdict",
        "summary",
        "evidence_json",
        "duration_s",
        "started_at",
        "node",
        "profile",
    ),
    "measurements": ("run_id", "env_role", "source", "series", "values_json", "node", "profile"),
    "artifacts": ("run_id", "name", "media_type", "content", "node", "profile"),
    "section_results": (
        "run_id",
        "section",
        "key",
        "env_role",
        "verdict",
        "payload_json",
        "created_at",
        "node",
        "profile",
    ),
}
