#!/usr/bin/env python
"""Run the authors' MATLAB code in GNU Octave and compare its weights with ebp_lib's, epoch by epoch.

The authors' code (github.com/ExpectationBackpropagation/EBP_Matlab_Code) carries no licence, so this repository
does not include it: clone it yourself (with its history, which the comparison needs) and install Octave,

    git clone https://github.com/ExpectationBackpropagation/EBP_Matlab_Code /tmp/EBP_Matlab_Code
    apt-get install octave octave-statistics        # Debian; normcdf / normpdf come from the statistics package
    python scripts/authors_code_octave.py /tmp/EBP_Matlab_Code --out outputs/authors_code/octave.json

For each case below, the script takes the Learning_Algorithms/*.m file at the named commit, calls the MATLAB
function once per epoch (as their RunMe.m does) on the first n MNIST training images in a new random order, from
ebp_lib's initial weights, and trains the same network with ebp_lib's reference engine (float64) on the same
orders under the named update. It records, after every epoch, the largest |Δh| and |Δb| relative to the largest
|h| and |b|, and a verdict: agree when every epoch is within TOLERANCE (rounding: the two sides differ only in the
order of float64 sums), and the same for a control that must disagree (the other update on the same code).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np
from scipy import io

import ebp_data
import ebp_lib as ebp
import ebp_train
from reproduction.records import machine_record, write_json

TOLERANCE = 1e-9  # relative to the largest |h|: float64 rounding over a few hundred steps, far below any variant
# (weights, MATLAB file, commit of the authors' repository, our update, the control update that must differ)
CASES = [
    ("binary", "Binary_EBP_minibatch.m", "b675655", "authors-2015", "spec"),   # the code of March 2015
    ("binary", "Binary_EBP_minibatch.m", "449a261", "spec", "authors-2015"),   # after "Bug fixed in updating h"
    ("real", "Real_EBP_minibatch.m", "449a261", "authors", "spec"),
]
DRIVER = r"""
pkg load statistics
addpath(code_dir);
load(in_file);
L = numel(K) - 1;
h_cell = cell(L, 1); bias_cell = cell(L, 1);
for ll = 1:L
  h_cell{ll} = eval(sprintf('h0_%d', ll)); bias_cell{ll} = eval(sprintf('b0_%d', ll))';
end
out = struct();
for e = 1:size(orders, 1)
  o = orders(e, :);
  [~, ~, h_cell, bias_cell] = feval(fname, x(o, :), d(o, :), 1, K, h_cell, bias_cell, 1, 1, 0, batch_size);
  for ll = 1:L
    out.(sprintf('h_%d_%d', e, ll)) = h_cell{ll};
    out.(sprintf('b_%d_%d', e, ll)) = bias_cell{ll};
  end
end
save('-v7', out_file, '-struct', 'out');
"""


def authors_file(repo: Path, commit: str, name: str, into: Path) -> str:
    """Write Learning_Algorithms/<name> of `commit` into the folder `into`; return its sha1."""
    text = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:Learning_Algorithms/{name}"],
                          check=True, capture_output=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    (into / name).write_bytes(text)
    return hashlib.sha1(text).hexdigest()


def run_octave(code_dir: Path, fname: str, x, d, sizes, h0, b0, orders, batch_size, work: Path) -> list:
    """The MATLAB function `fname` called once per row of `orders` (0-based image indices); per epoch, per layer
    (h, b) as Octave returns them."""
    inputs = {"x": x, "d": d, "K": np.array(sizes, float), "orders": orders + 1.0, "batch_size": float(batch_size)}
    for k, (h, b) in enumerate(zip(h0, b0), start=1):
        inputs[f"h0_{k}"], inputs[f"b0_{k}"] = h, b[None, :]
    io.savemat(work / "in.mat", inputs)
    script = (f"code_dir = '{code_dir}'; in_file = '{work / 'in.mat'}'; out_file = '{work / 'out.mat'}'; "
              f"fname = '{fname}';\n" + DRIVER)
    (work / "driver.m").write_text(script)
    subprocess.run(["octave", "--no-gui", "--quiet", "--no-window-system", str(work / "driver.m")], check=True,
                   capture_output=True, cwd=work)
    out = io.loadmat(work / "out.mat")
    return [[(out[f"h_{e}_{k}"], out[f"b_{e}_{k}"][:, 0]) for k in range(1, len(h0) + 1)]
            for e in range(1, len(orders) + 1)]


def ours(weights, architecture, update, x, y, orders, batch_size, seed):
    """ebp_lib's reference engine on the same orders: per epoch, per layer (h, b)."""
    net = ebp.init_network(architecture, weights, seed=seed, real_update=update)
    out = []
    for order in orders:
        ebp_train.train_steps(net, x, y, order, batch_size, None, engine="reference")
        out.append([(layer.h.copy(), layer.b.copy()) for layer in net.layers])
    return out


def relative_differences(theirs, mine) -> list[dict]:
    """Per epoch: the largest |Δh| over layers relative to the largest |h|, and the same for b."""
    rows = []
    for epoch_theirs, epoch_mine in zip(theirs, mine):
        h_scale = max(np.abs(h).max() for h, _ in epoch_theirs)
        b_scale = max(max(np.abs(b).max() for _, b in epoch_theirs), 1.0)
        rows.append({"h": max(np.abs(a - c).max() for (a, _), (c, _) in zip(epoch_theirs, epoch_mine)) / h_scale,
                     "b": max(np.abs(a - c).max() for (_, a), (_, c) in zip(epoch_theirs, epoch_mine)) / b_scale})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("authors_repo", type=Path, help="a git clone of EBP_Matlab_Code, with its history")
    parser.add_argument("--out", type=Path, default=Path(".cache/authors_code_octave.json"))
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if shutil.which("octave") is None:
        print("error: GNU Octave is not installed (Debian: apt-get install octave octave-statistics)", file=sys.stderr)
        return 2
    if not (args.authors_repo / ".git").exists() and not (args.authors_repo / "HEAD").exists():
        print(f"error: {args.authors_repo} is not a git clone of EBP_Matlab_Code (clone it with its history: "
              f"git clone https://github.com/ExpectationBackpropagation/EBP_Matlab_Code)", file=sys.stderr)
        return 2
    data = ebp_data.load_dataset("mnist")
    x, y = data.x_train[:args.n_train], data.y_train[:args.n_train]
    rng = np.random.default_rng(args.seed)
    orders = np.stack([rng.permutation(args.n_train) for _ in range(args.epochs)])
    batch_size = 10
    cases = []
    for weights, fname, commit, update, control in CASES:
        for architecture in ([40, 10], [30, 30, 10]):
            net = ebp.init_network(architecture, weights, seed=args.seed)
            h0, b0 = [layer.h for layer in net.layers], [layer.b for layer in net.layers]
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                sha1 = authors_file(args.authors_repo, commit, fname, work / "code")
                theirs = run_octave(work / "code", fname[:-2], x, y, [784] + architecture, h0, b0, orders,
                                    batch_size, work)
            same = relative_differences(theirs, ours(weights, architecture, update, x, y, orders, batch_size,
                                                     args.seed))
            other = relative_differences(theirs, ours(weights, architecture, control, x, y, orders, batch_size,
                                                      args.seed))
            case = {"weights": weights, "architecture": [784] + architecture, "file": f"Learning_Algorithms/{fname}",
                    "commit": commit, "sha1": sha1, "update": update, "per_epoch": same,
                    "agree": all(r["h"] <= TOLERANCE and r["b"] <= TOLERANCE for r in same),
                    "control_update": control, "control_per_epoch": other,
                    "control_disagrees": any(r["h"] > 1e3 * TOLERANCE for r in other)}
            cases.append(case)
            print(f"{weights} {case['architecture']} {fname} @ {commit}: ours under {update!r} "
                  f"{'agrees' if case['agree'] else 'DISAGREES'} (largest relative |Δh| "
                  f"{max(r['h'] for r in same):.1e}); under {control!r} {max(r['h'] for r in other):.1e}")
    version = subprocess.run(["octave", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    record = {"what": "the authors' MATLAB code run in GNU Octave against ebp_lib's reference engine",
              "octave": version, "data": f"MNIST, the first {args.n_train} training images, per-pixel standardised",
              "epochs": args.epochs, "batch_size": batch_size, "seed": args.seed, "tolerance": TOLERANCE,
              "cases": cases, "machine": machine_record()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, record)
    ok = all(c["agree"] and c["control_disagrees"] for c in cases)
    print(f"{sum(c['agree'] for c in cases)} of {len(cases)} cases agree; every control disagrees: "
          f"{all(c['control_disagrees'] for c in cases)}; record: {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
