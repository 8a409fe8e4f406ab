"""Seed 004's check: the state store has a ``lessons_learned`` table of the
right shape.

    python scripts/verify_lessons_schema.py [DB]   (default: $DEVS_DB, else
                                                     ./devs_state.sqlite)

Opens the SQLite file read-only and checks the columns ``(id, task_id,
failed_strategy, rca_summary, logged_at)``, ``UNIQUE(task_id, failed_strategy)``
and an index on ``task_id``. Exits 1 naming each problem, 0 when all hold.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from devs.adapters.config import Settings

COLUMNS = ("id", "task_id", "failed_strategy", "rca_summary", "logged_at")
NOT_NULL = ("task_id", "failed_strategy", "rca_summary", "logged_at")


def problems(db: Path) -> list[str]:
    if not db.is_file():
        return [f"{db} does not exist"]
    uri = f"file:{db}?mode=ro"
    with sqlite3.connect(uri, uri=True) as connection:
        columns = {
            row[1]: row
            for row in connection.execute("PRAGMA table_info(lessons_learned)")
        }
        if not columns:
            return [f"{db} has no lessons_learned table"]
        found = [f"missing column {name}" for name in COLUMNS if name not in columns]
        found += [
            f"column {name} may be NULL"
            for name in NOT_NULL
            if name in columns and not columns[name][3]
        ]
        if "id" in columns and not columns["id"][5]:
            found.append("id is not the primary key")
        indexes = {
            name: (
                bool(unique),
                tuple(
                    info[2]
                    for info in connection.execute(f"PRAGMA index_info('{name}')")
                ),
            )
            for _, name, unique, *_ in connection.execute(
                "PRAGMA index_list(lessons_learned)"
            )
        }
    if (True, ("task_id", "failed_strategy")) not in indexes.values():
        found.append("no UNIQUE(task_id, failed_strategy)")
    if not any(cols[:1] == ("task_id",) for _, cols in indexes.values()):
        found.append("no index on task_id")
    return found


def main() -> int:
    db = Path(sys.argv[1] if len(sys.argv) > 1 else Settings().db)
    found = problems(db)
    for problem in found:
        print(f"verify_lessons_schema: {problem}", file=sys.stderr)
    if not found:
        print(f"verify_lessons_schema: ok ({db})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
