"""Write docs/state-chart.md from the real state machine."""

from pathlib import Path

from devs.domain.chart import chart_document

target = Path(__file__).resolve().parent.parent / "docs" / "state-chart.md"
target.write_text(chart_document(), encoding="utf-8")
print(f"wrote {target}")
