"""The Pillow and torchvision side of ltrain's image tests: writes test images with Pillow and
what Pillow and torchvision make of them (no downloads).

  image_tools.py make-decode-set DIR   (PNG in every colour type and depth, JPEG gray/RGB/4:2:0/
                                        progressive, plus Pillow's pixels: DIR/pillow.safetensors)
  image_tools.py fashion-folder DIR N_TRAIN N_VAL
                                       (the first N of Fashion-MNIST's train and test sets as PNG
                                        class folders DIR/train/<class>, DIR/val/<class>, a
                                        manifest DIR/train.csv, DIR/val.csv, and the same
                                        subsets as IDX files in DIR/idx)
  image_tools.py eval-transform DIR RESIZE SIZE
                                       (torchvision's Resize(RESIZE) + CenterCrop(SIZE) on the
                                        PIL image of each file in DIR: DIR/eval.safetensors)
  image_tools.py mixed-mode-folder DIR  (class folders DIR/train/<class>, DIR/val/<class> of PNG
                                        files in Pillow's modes L, RGB, RGBA and P and JPEG files
                                        in L and RGB, the classes dark and light)
  image_tools.py image-folder-samples ROOT
                                       (torchvision.datasets.ImageFolder(ROOT).samples, a
                                        "path label" line each)
"""
import gzip
import os
import sys

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from torchvision import datasets
from torchvision import transforms as T


def pattern(h, w, c, seed):
    """Smooth gradients plus noise: JPEG has edges and flat parts to code."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(1, w - 1)), (y * 255 // max(1, h - 1)), ((x + y) * 7) % 256], -1)
    noise = rng.integers(0, 40, (h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)[..., :c]


def make_decode_set(d):
    os.makedirs(d, exist_ok=True)
    rgb = pattern(37, 53, 3, 0)
    images = {
        "rgb.png": Image.fromarray(rgb),
        "rgba.png": Image.fromarray(np.dstack([rgb, pattern(37, 53, 1, 1)])),
        "gray.png": Image.fromarray(rgb[..., 0]),
        "gray_alpha.png": Image.fromarray(np.dstack([rgb[..., 0], rgb[..., 1]]), mode="LA"),
        "palette.png": Image.fromarray(rgb).quantize(64),
        "bilevel.png": Image.fromarray(rgb[..., 0] > 128),
        "rgb.jpg": Image.fromarray(rgb),
        "gray.jpg": Image.fromarray(rgb[..., 0]),
    }
    trns = Image.fromarray(rgb).quantize(16)
    trns.info["transparency"] = 0
    images["palette_trns.png"] = trns
    out = {}
    for name, im in images.items():
        path = os.path.join(d, name)
        if name.endswith(".jpg"):
            im.save(path, quality=90)
        else:
            im.save(path)
    # 16-bit PNGs written by Pillow's own I;16 mode and by numpy through a raw PNG encoder.
    g16 = (pattern(37, 53, 1, 2)[..., 0].astype(np.uint16) * 2 + 1)  # both sides of 255
    Image.fromarray(g16).save(os.path.join(d, "gray16.png"))
    progressive = os.path.join(d, "progressive.jpg")
    Image.fromarray(rgb).save(progressive, quality=85, progressive=True, subsampling=2)
    # Files with defects Pillow decodes anyway: junk bytes before the JPEG's end marker (a libjpeg
    # warning), a PNG without its IEND chunk.
    with open(os.path.join(d, "rgb.jpg"), "rb") as f:
        jpg = f.read()
    with open(os.path.join(d, "extra_bytes.jpg"), "wb") as f:
        f.write(jpg[:-2] + b"\x00\x00\x00" + jpg[-2:])
    with open(os.path.join(d, "rgb.png"), "rb") as f:
        png = f.read()
    with open(os.path.join(d, "no_iend.png"), "wb") as f:
        f.write(png[:-12])
    # An ImageNet-like photo size for DCT-scaled decoding, and Pillow's draft (libjpeg scaled
    # to 1/4) of it.
    large = os.path.join(d, "large.jpg")
    Image.fromarray(pattern(300, 400, 3, 3)).save(large, quality=90)
    with Image.open(large) as im:
        im.draft("RGB", (100, 75))
        out["draft4:large.jpg"] = torch.from_numpy(np.asarray(im.convert("RGB")).copy())
    names = sorted(os.listdir(d))
    for name in names:
        if not (name.endswith(".png") or name.endswith(".jpg")):
            continue
        with Image.open(os.path.join(d, name)) as im:
            out[name + ":RGB"] = torch.from_numpy(np.asarray(im.convert("RGB")).copy())
            out[name + ":L"] = torch.from_numpy(np.asarray(im.convert("RGB").convert("L")).copy())
    save_file(out, os.path.join(d, "pillow.safetensors"))


FASHION = os.environ.get("LTRAIN_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
           "Ankle boot"]


def read_idx(name):
    with gzip.open(os.path.join(FASHION, name)) as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def write_idx(path, a):
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, a.ndim]) + b"".join(d.to_bytes(4, "big") for d in a.shape))
        f.write(a.tobytes())


def fashion_folder(d, n_train, n_val):
    os.makedirs(os.path.join(d, "idx"), exist_ok=True)
    for split, stem, n in (("train", "train", int(n_train)), ("val", "t10k", int(n_val))):
        images = read_idx(f"{stem}-images-idx3-ubyte.gz")[:n]
        labels = read_idx(f"{stem}-labels-idx1-ubyte.gz")[:n]
        rows = ["path,label"]
        for i, (im, y) in enumerate(zip(images, labels)):
            rel = os.path.join(split, CLASSES[y], f"{i:05d}.png")
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            Image.fromarray(im).save(os.path.join(d, rel))
            rows.append(f"{rel},{CLASSES.index(CLASSES[y])}")
        with open(os.path.join(d, f"{split}.csv"), "w") as f:
            f.write("\n".join(rows) + "\n")
        write_idx(os.path.join(d, "idx", f"{stem}-images-idx3-ubyte"), images)
        write_idx(os.path.join(d, "idx", f"{stem}-labels-idx1-ubyte"), labels)


def eval_transform(d, resize, size):
    resize, size = int(resize), int(size)
    out = {}
    for name in sorted(os.listdir(d)):
        if not (name.endswith(".png") or name.endswith(".jpg")):
            continue
        with Image.open(os.path.join(d, name)) as im:
            # torchvision's own Resize(int) and CenterCrop on the PIL image.
            im = T.CenterCrop(size)(T.Resize(resize)(im.convert("RGB")))
            out[name] = torch.from_numpy(np.asarray(im).copy())
    save_file(out, os.path.join(d, "eval.safetensors"))


def mixed_mode_folder(d):
    """Two classes told apart by brightness, each file in one of six modes and formats, as a
    folder of photos and scans collected from several tools would be."""
    kinds = [("L", "png"), ("RGB", "png"), ("RGBA", "png"), ("P", "png"), ("L", "jpg"), ("RGB", "jpg")]
    for split, n in (("train", 24), ("val", 12)):
        for label, (cls, offset) in enumerate((("dark", 0), ("light", 150))):
            os.makedirs(os.path.join(d, split, cls), exist_ok=True)
            for i in range(n):
                mode, ext = kinds[i % len(kinds)]
                rgb = np.clip(pattern(30, 34, 3, 1000 * label + i) // 3 + offset, 0, 255).astype(np.uint8)
                im = Image.fromarray(rgb)
                if mode == "L":
                    im = im.convert("L")
                elif mode == "RGBA":
                    im = Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)]))
                elif mode == "P":
                    im = im.quantize(32)
                assert im.mode == mode, (im.mode, mode)
                im.save(os.path.join(d, split, cls, f"{i:03d}-{mode}.{ext}"))


def image_folder_samples(root):
    """torchvision.datasets.ImageFolder's (path, class index) list, one per line."""
    for path, label in datasets.ImageFolder(root).samples:
        print(path, label)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make-decode-set":
        make_decode_set(*args)
    elif cmd == "fashion-folder":
        fashion_folder(*args)
    elif cmd == "eval-transform":
        eval_transform(*args)
    elif cmd == "mixed-mode-folder":
        mixed_mode_folder(*args)
    elif cmd == "image-folder-samples":
        image_folder_samples(*args)
    else:
        sys.exit(f"image_tools.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
