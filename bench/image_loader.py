"""ltrain's image loader against PyTorch's, side by side in one run (issue 16).

A folder of JPEGs at ImageNet-like sizes is written by Pillow (nothing large is committed); then,
for 1 and 2 workers, alternately REPEATS times each:
  python   torch.utils.data.DataLoader over torchvision.datasets.ImageFolder with
           RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize (worker processes)
  ltrain   `ltrain loader-speed`: the same folder, data.augment resized_crop_flip to 224 and the
           same normalisation (worker threads), Pillow's pixels
  ltrain+dct  the same with data.jpeg_dct_scaling (libjpeg decodes at 1/2..1/8 when the crop
           keeps no more detail)
Images/s are timed from the first batch in hand to the last on both sides (worker start-up left
out). Prints a Markdown table with the ratios and the issue's target (>= 1.5x per worker count).

  bench/image_loader.py [--images 2000] [--repeats 3] [--batch-size 64] [--workers 1,2]
                        [--large] [--keep DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LTRAIN = os.environ.get("LTRAIN_BIN", os.path.join(ROOT, "build", "ltrain"))
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# ImageNet's common shapes (width, height): most photos are 500 on the long side.
SIZES = [(500, 375), (375, 500), (500, 333), (500, 400), (640, 480), (400, 300), (500, 500)]


# --large: camera-sized photos (3 MP), where DCT scaling decodes most crops at 1/2 or 1/4.
LARGE_SIZES = [(2048, 1536), (1536, 2048)]


def make_folder(d, n, sizes, classes=10):
    rng = np.random.default_rng(0)
    for i in range(n):
        w, h = sizes[i % len(sizes)]
        y, x = np.mgrid[0:h, 0:w]
        # Smooth colour fields with noise: photo-like JPEG sizes (about 60-120 KB).
        f = rng.uniform(0.005, 0.03, 3)
        base = np.stack([127 + 100 * np.sin(x * f[0] + y * f[1]), 127 + 100 * np.cos(y * f[2]),
                         (x + y) * 255.0 / (w + h)], -1)
        im = np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        cdir = os.path.join(d, "train", f"class{i % classes:02d}")
        os.makedirs(cdir, exist_ok=True)
        Image.fromarray(im).save(os.path.join(cdir, f"{i:05d}.jpg"), quality=90)
    # image_folder needs a validation split too; loader-speed reads the training one only.
    for c in range(classes):
        name = f"class{c:02d}"
        first = sorted(os.listdir(os.path.join(d, "train", name)))[0]
        os.makedirs(os.path.join(d, "val", name), exist_ok=True)
        shutil.copy(os.path.join(d, "train", name, first), os.path.join(d, "val", name, first))


def python_side(d, workers, batch):
    import torch
    from torchvision import datasets, transforms as T

    torch.set_num_threads(1)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize(MEAN, STD)])
    ds = datasets.ImageFolder(os.path.join(d, "train"), transform=tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True,
                                         num_workers=workers)
    it = iter(loader)
    next(it)  # the workers' start-up: left out, as ltrain leaves its threads' out
    t0, n = time.perf_counter(), 0
    for x, _ in it:
        n += x.shape[0]
    return n / (time.perf_counter() - t0)


def ltrain_side(d, workers, batch, dct):
    cfg = os.path.join(ROOT, "configs", "quickstart.yaml")
    args = [LTRAIN, "loader-speed", cfg, "data.dataset=image_folder", f"data.path={d}",
            "data.augment=resized_crop_flip", "data.image_size=224", f"data.batch_size={batch}",
            f"data.num_workers={workers}", "train.threads=1", "model.name=mlp"]
    if dct:
        args.append("data.jpeg_dct_scaling=true")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["examples_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--keep", help="write (or reuse) the folder here instead of a temporary one")
    ap.add_argument("--large", action="store_true", help="3 MP photos instead of ImageNet's sizes")
    a = ap.parse_args()
    d = a.keep or tempfile.mkdtemp(prefix="ltrain-image-bench-")
    try:
        if not os.path.isdir(os.path.join(d, "train")):
            t = time.perf_counter()
            make_folder(d, a.images, LARGE_SIZES if a.large else SIZES)
            print(f"wrote {a.images} JPEGs to {d} in {time.perf_counter() - t:.0f} s",
                  file=sys.stderr)
        sizes = [os.path.getsize(os.path.join(r, f)) for r, _, fs in
                 os.walk(os.path.join(d, "train")) for f in fs]
        print(f"{len(sizes)} JPEGs, mean {statistics.mean(sizes) / 1024:.0f} KiB; batch "
              f"{a.batch_size}, RandomResizedCrop(224) + flip + normalise; {os.cpu_count()} "
              f"cores; median of {a.repeats}\n")
        print("| workers | PyTorch DataLoader img/s | ltrain img/s | ratio | ltrain + DCT scaling "
              "img/s | ratio | target >= 1.5x |")
        print("|---|---|---|---|---|---|---|")
        for w in [int(x) for x in a.workers.split(",")]:
            py, lt, dc = [], [], []
            for _ in range(a.repeats):  # alternated, so that drift hits both sides
                py.append(python_side(d, w, a.batch_size))
                lt.append(ltrain_side(d, w, a.batch_size, False))
                dc.append(ltrain_side(d, w, a.batch_size, True))
            p, l, c = (statistics.median(v) for v in (py, lt, dc))
            print(f"| {w} | {p:.0f} | {l:.0f} | {l / p:.2f} | {c:.0f} | {c / p:.2f} | "
                  f"{'met' if l / p >= 1.5 else 'missed'} |", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
