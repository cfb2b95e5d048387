#!/usr/bin/env python3
"""Markdown tables for docs/benchmarks.md from caf_collective_perf --csv.

Usage: csv_tables.py FILE.csv [op]    one op in detail (default allreduce)
       csv_tables.py FILE.csv --ops   every op, compact
       csv_tables.py --compare THREADS.csv PROCS.csv MPI.csv [--copy GBS]
                     [--plot PREFIX]  shm (threads, processes) against the
                                      MPI reference, one table per op
                                      (compare_mpi.sh); %copy against a
                                      copy bandwidth of GBS (all threads
                                      together) for every column, else
                                      against each run's own measurement;
                                      each of the three may name several
                                      CSVs joined by commas, of which every
                                      cell keeps the fastest

One row per size: time (us) and busbw (GB/s) of each path (out-of-place),
the fastest Gloo algorithm, the slowest single iteration of direct (to show
stalls), and the ratios ours/raw (busbw ratios, > 1 means we are faster).
The time column is whatever the run reported (--time mean|median).
"""
import csv
import sys
from collections import defaultdict


def fmt_size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


# The driver runs these ops in place: its time compares with the direct
# path's in-place column (the out-of-place one pays a copy it does not).
DRIVER_IN_PLACE = ("allreduce", "reduce", "broadcast")


def time_of(r, prefix, size):
    """The reported time of a row's column: the one its busbw derives from."""
    algbw = float(r[prefix + "_algbw"])
    return size / (algbw * 1e3) if algbw > 0 else float(
        r[prefix + "_median_us"])


def all_ops(path):
    rows = defaultdict(dict)
    order = []
    for r in csv.DictReader(open(path)):
        if not r["oop_mean_us"]:
            continue
        key = (r["op"], int(r["size"]))
        if key not in rows:
            order.append(key)
        t = time_of(r, "oop", key[1])
        rows[key][r["path"]] = (t, float(r["oop_busbw"]))
        if r["path"] == "direct" and r["ip_mean_us"]:
            rows[key]["direct in place"] = (time_of(r, "ip", key[1]),
                                            float(r["ip_busbw"]))
    print("| op | size | raw-gloo us | direct us | driver us | direct/raw-gloo"
          " | driver/direct | direct GB/s |")
    print("|---|---|---|---|---|---|---|---|")
    for op, size in order:
        v = rows[(op, size)]
        cell = lambda p: f"{v[p][0]:.1f}" if p in v else "-"
        ratio = lambda a, b: (f"{v[b][0] / v[a][0]:.2f}"
                              if a in v and b in v and v[a][0] > 0 else "-")
        bw = f"{v['direct'][1]:.3f}" if "direct" in v else "-"
        base = ("direct in place" if op in DRIVER_IN_PLACE and
                "direct in place" in v else "direct")
        print(f"| {op} | {fmt_size(size)} | {cell('raw-gloo')} | "
              f"{cell('direct')} | {cell('driver')} | "
              f"{ratio('direct', 'raw-gloo')} | {ratio('driver', base)} | "
              f"{bw} |")


def load(paths, want):
    """{(op, size): {"t": us, "bw": busbw, "copy": fraction}} of one path.

    `paths`: one CSV, or several joined by commas (the rounds of
    compare_mpi.sh --rounds): each cell keeps its fastest round.
    """
    rows = {}
    for path in paths.split(","):
        for r in csv.DictReader(open(path)):
            if r["path"] != want or not r["oop_mean_us"]:
                continue
            size = int(r["size"])
            algbw = float(r["oop_algbw"])
            t = size / (algbw * 1e3) if algbw > 0 else float(
                r["oop_median_us"])
            key = (r["op"], size)
            if key in rows and rows[key]["t"] <= t:
                continue
            frac = r.get("oop_copy_frac") or ""
            rows[key] = dict(t=t, bw=float(r["oop_busbw"]),
                             copy=float(frac) if frac else None,
                             ranks=int(r["ranks"]))
    return rows


def compare(threads_csv, procs_csv, mpi_csv, copy_gbs=None,
            plot_prefix=None):
    # thr: shm, ranks as threads; proc: shm, ranks as processes; gloo: our
    # API on Gloo, threads (compare_mpi.sh --gloo).
    cols = [("thr", load(threads_csv, "shm")),
            ("proc", load(procs_csv, "shm")),
            ("MPI", load(mpi_csv, "mpi"))]
    gloo = load(threads_csv, "direct")
    if gloo:
        cols.append(("gloo", gloo))
    # thr-p, proc-p: the same ops as persistent ops (compare_mpi.sh
    # --persistent, path shm-persistent).
    persistent = [(name, load(f, "shm-persistent"))
                  for name, f in (("thr-p", threads_csv),
                                  ("proc-p", procs_csv))]
    persistent = [(n, rows) for n, rows in persistent if rows]
    cols += persistent
    keys = []
    for _, rows in cols:
        for k in rows:
            if k not in keys:
                keys.append(k)
    ranks = next((v["ranks"] for _, rows in cols for v in rows.values()), 0)
    mpi = cols[2][1]
    if copy_gbs:
        model = copy_gbs / ranks
        for _, rows in cols:
            for v in rows.values():
                v["copy"] = v["bw"] / model
        print(f"\n%copy: busbw / copy model = busbw / ({copy_gbs:.2f} GB/s "
              f"/ {ranks} ranks = {model:.2f} GB/s)")
    summary(cols, keys, ranks)
    for op in dict.fromkeys(k[0] for k in keys):
        sizes = sorted(k[1] for k in keys if k[0] == op)
        print(f"\n**{op}, {ranks} ranks**: out-of-place; thr/proc: shm "
              "with ranks as threads/processes" +
              (", gloo: our API on Gloo (threads)" if gloo else "") +
              (", thr-p/proc-p: the same as persistent ops" if persistent
               else "") +
              "; time in us as reported, busbw in GB/s; x/MPI: busbw ratio "
              "(> 1: ours faster); %copy: busbw / copy model\n")
        head = ["size"] + [f"{n} us" for n, _ in cols] + [
            f"{n} GB/s" for n, _ in cols] + [
            "thr/MPI", "proc/MPI", "thr %copy", "proc %copy"]
        if gloo:
            head.append("thr/gloo")
        head += [f"{n}/MPI" for n, _ in persistent]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for size in sizes:
            k = (op, size)
            cells = [fmt_size(size)]
            cells += [f"{rows[k]['t']:.1f}" if k in rows else "-"
                      for _, rows in cols]
            cells += [f"{rows[k]['bw']:.3f}" if k in rows else "-"
                      for _, rows in cols]

            def ratio(rows, base):
                if k in rows and k in base and rows[k]["t"] > 0:
                    return f"{base[k]['t'] / rows[k]['t']:.2f}"
                return "-"
            cells.append(ratio(cols[0][1], mpi))
            cells.append(ratio(cols[1][1], mpi))
            for _, rows in cols[:2]:
                c = rows.get(k, {}).get("copy")
                cells.append(f"{100 * c:.0f}%" if c is not None else "-")
            if gloo:
                cells.append(ratio(cols[0][1], gloo))
            cells += [ratio(rows, mpi) for _, rows in persistent]
            print("| " + " | ".join(cells) + " |")
    if plot_prefix:
        plot(cols, keys, ranks, plot_prefix,
             copy_gbs / ranks if copy_gbs else None)


def summary(cols, keys, ranks):
    """Headline: smallest size's time, busbw at 1, 64 and 256 MiB."""
    names = " / ".join(n for n, _ in cols)
    print(f"\n**Summary, {ranks} ranks** (each cell: {names}; out-of-place)"
          "\n")
    marks = [(1 << 20, "1 MiB"), (64 << 20, "64 MiB"), (256 << 20, "256 MiB")]
    print("| op | smallest size | time us | " +
          " | ".join(f"busbw GB/s at {m}" for _, m in marks) + " |")
    print("|" + "---|" * (3 + len(marks)))
    for op in dict.fromkeys(k[0] for k in keys):
        sizes = sorted(k[1] for k in keys if k[0] == op)

        def cell(size, field, fmt):
            return " / ".join(
                fmt.format(rows[(op, size)][field]) if (op, size) in rows
                else "-" for _, rows in cols)
        cells = [op, fmt_size(sizes[0]), cell(sizes[0], "t", "{:.1f}")]
        cells += [cell(size, "bw", "{:.2f}") for size, _ in marks]
        print("| " + " | ".join(cells) + " |")


def plot(cols, keys, ranks, prefix, model=None):
    """One PNG per op: busbw against size of every column (gnuplot)."""
    import subprocess
    for op in dict.fromkeys(k[0] for k in keys):
        data = f"{prefix}-{op}.dat"
        names = []
        with open(data, "w") as out:
            for name, rows in cols:
                pts = sorted((s, v["bw"]) for (o, s), v in rows.items()
                             if o == op and s > 0)
                if not pts:
                    continue
                names.append({"thr": "shm, threads", "proc": "shm, processes",
                              "MPI": "Open MPI shared memory",
                              "gloo": "our API on Gloo, threads"}.get(name,
                                                                      name))
                for s, bw in pts:
                    out.write(f"{s} {bw}\n")
                out.write("\n\n")
        script = (
            "set terminal png size 1000,600 noenhanced\n"
            f"set output '{prefix}-{op}.png'\n"
            f"set title '{op}, {ranks} ranks, out-of-place: shm against "
            "MPI shared memory'\n"
            "set logscale x 2\nset format x '%.0b%B'\n"
            "set xlabel 'size (bytes)'\nset ylabel 'busbw (GB/s)'\n"
            "set key top left\nset grid\nplot " + ", ".join(
                f"'{data}' index {i} using 1:2 with linespoints title "
                f"'{n}'" for i, n in enumerate(names)) +
            (f", {model} with lines dashtype 2 title 'copy model'"
             if model else "") + "\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=False)
        import os
        os.remove(data)


def main():
    if sys.argv[1] == "--compare":
        opts = dict(zip(sys.argv[5::2], sys.argv[6::2]))
        copy = float(opts["--copy"]) if "--copy" in opts else None
        return compare(sys.argv[2], sys.argv[3], sys.argv[4], copy,
                       opts.get("--plot"))
    path = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--ops":
        return all_ops(path)
    op = sys.argv[2] if len(sys.argv) > 2 else "allreduce"
    rows = defaultdict(dict)
    median = False
    for r in csv.DictReader(open(path)):
        if r["op"] != op or not r["oop_mean_us"]:
            continue
        size = int(r["size"])
        busbw = float(r["oop_busbw"])
        # busbw derives from the reported time: recover which one it was.
        algbw = float(r["oop_algbw"])
        t = size / (algbw * 1e3) if algbw > 0 else float(r["oop_mean_us"])
        if size > 0 and abs(t - float(r["oop_median_us"])) < abs(
                t - float(r["oop_mean_us"])):
            median = True
        rows[size][r["path"]] = dict(t=t, bw=busbw, algo=r["algo"],
                                     max=float(r["oop_max_us"]))
        if r["path"] == "direct" and r["ip_mean_us"]:
            rows[size]["direct in place"] = dict(t=time_of(r, "ip", size))
    paths = [p for p in ("raw-gloo", "raw-gloo-best", "direct", "shm",
                         "driver", "mpi")
             if any(p in v for v in rows.values())]
    head = ["size"] + [f"{p} us" for p in paths] + [
        "best algo", "direct max us"]
    ratios = []
    if "raw-gloo" in paths:
        ratios.append(("direct/raw-gloo", "direct", "raw-gloo"))
    if "raw-gloo-best" in paths:
        ratios.append(("direct/best", "direct", "raw-gloo-best"))
    if "driver" in paths:
        ratios.append(("driver/direct", "driver",
                       "direct in place" if op in DRIVER_IN_PLACE
                       else "direct"))
    head += [name for name, _, _ in ratios]
    head += [f"{p} GB/s" for p in paths]
    print(f"Time per op: {'median' if median else 'mean'} iteration of the "
          "slowest rank, best of the repeated series.\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size in sorted(rows):
        v = rows[size]
        cells = [fmt_size(size)]
        cells += [f"{v[p]['t']:.1f}" if p in v else "-" for p in paths]
        cells.append(v.get("raw-gloo-best", {}).get("algo", "-") or "-")
        cells.append(f"{v['direct']['max']:.0f}" if "direct" in v else "-")
        for _, a, b in ratios:
            if a in v and b in v and v[a]["t"] > 0:
                cells.append(f"{v[b]['t'] / v[a]['t']:.2f}")
            else:
                cells.append("-")
        cells += [f"{v[p]['bw']:.3f}" if p in v else "-" for p in paths]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
