#!/usr/bin/python3
"""Bus bandwidth against size, one line per input and collective, from the
JSON of `backplane bench ... --json` (Debian's python3 by path, for its
python3-matplotlib).

    tools/plot_bench.py OUT.png|OUT.svg RESULT.json [RESULT.json ...]
                        [--mode out_of_place|in_place] [--title TEXT]

Each RESULT.json is one result object or a list of them (`bench all`):
{"collective", "dtype", "ranks", "rows": [{"size", "out_of_place": {"busbw"},
"in_place": {"busbw"}}]}; rows whose busbw sits directly in the row (as
tools/bench's reference programs print it) are read too. A top-level "label"
names the line; without one, the file's name does. Sizes go on a log2 axis
with labels such as "64 KiB"; modes that failed or did not run are left out.
The output format follows the extension (.png or .svg). Exit status: 0 when
the plot was written, 1 when an input cannot be read, 2 bad usage.
"""

import argparse
import json
import sys
from pathlib import Path


def size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


def busbw_of(row: dict, mode: str):
    """The row's bus bandwidth in the mode, or None where it did not run or failed."""
    if "busbw" in row:  # flat rows: one mode only
        return row["busbw"]
    cell = row.get(mode)
    if not isinstance(cell, dict) or "busbw" not in cell:
        return None
    return cell["busbw"]


def read_series(path: Path, mode: str) -> list:
    """[(label, collective, description, [(size, busbw)])] for every result in the file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"plot_bench: {path}: {error}")
    results = data if isinstance(data, list) else [data]
    series = []
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
            print(f"plot_bench: {path}: a result without rows; left out", file=sys.stderr)
            continue
        label = result.get("label") or path.stem
        collective = result.get("collective", "?")
        points = [(row["size"], busbw) for row in result["rows"]
                  if row.get("size", 0) > 0 and (busbw := busbw_of(row, mode)) is not None]
        if not points:
            print(f"plot_bench: {path}: {collective} has no {mode} row with a size; left out", file=sys.stderr)
            continue
        details = [str(result[key]) for key in ("dtype", "reduce_op") if result.get(key)]
        if result.get("ranks"):
            details.append(f"{result['ranks']} ranks")
        series.append((label, collective, ", ".join(details), sorted(points)))
    return series


def main() -> int:
    parser = argparse.ArgumentParser(description="Plot busbw against size from `backplane bench --json` output.")
    parser.add_argument("output", type=Path, help="the picture to write: .png or .svg")
    parser.add_argument("inputs", type=Path, nargs="+",
                        help="JSON from `backplane bench ... --json` (or the same schema)")
    parser.add_argument("--mode", choices=("out_of_place", "in_place"), default="out_of_place",
                        help="which mode's busbw to plot (default out_of_place)")
    parser.add_argument("--title", help="the plot's title (default: the collective, type and ranks)")
    args = parser.parse_args()
    if args.output.suffix.lower() not in (".png", ".svg"):
        parser.error(f"{args.output}: the output must end in .png or .svg")

    series = [s for path in args.inputs for s in read_series(path, args.mode)]
    if not series:
        print("plot_bench: nothing to plot", file=sys.stderr)
        return 1

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    collectives = {collective for _, collective, _, _ in series}
    labels = {label for label, _, _, _ in series}
    figure, axes = plt.subplots(figsize=(9, 5.5))
    for label, collective, details, points in series:
        if len(collectives) > 1 and len(labels) > 1:
            name = f"{label}: {collective}"
        elif len(collectives) > 1:
            name = collective
        else:
            name = label
        sizes = [size for size, _ in points]
        axes.plot(sizes, [busbw for _, busbw in points], marker="o", markersize=3, label=name)

    sizes = sorted({size for *_, points in series for size, _ in points})
    axes.set_xscale("log", base=2)
    # Ticks at powers of two across the range (measured sizes may be rounded
    # down to whole elements, 1020 B for 1 KiB), thinned to at most ~12.
    low, high = (sizes[0].bit_length() - 1, (sizes[-1] - 1).bit_length())
    powers = list(range(low, max(high, low) + 1))
    step = max(1, (len(powers) + 11) // 12)
    ticks = [1 << power for power in powers[::step]]
    axes.set_xticks(ticks)
    axes.set_xticklabels([size_text(tick) for tick in ticks], rotation=45, ha="right")
    axes.minorticks_off()
    axes.set_xlabel("size (a rank's largest buffer)")
    axes.set_ylabel("busbw (GB/s)")
    axes.set_ylim(bottom=0)
    axes.grid(True, which="major", alpha=0.3)
    if args.title:
        title = args.title
    elif len(collectives) == 1:
        details = {d for _, _, d, _ in series}
        title = next(iter(collectives)) + (f" ({details.pop()})" if len(details) == 1 and "" not in details else "")
    else:
        title = "bus bandwidth"
    axes.set_title(f"{title}, {args.mode.replace('_', '-')}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(args.output)
    print(f"plot_bench: wrote {args.output} ({len(series)} line{'s' if len(series) != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
