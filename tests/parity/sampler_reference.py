"""Prints torch.utils.data.DistributedSampler's indices for each setting line of a file.

Input lines: N WORLD RANK SHUFFLE SEED EPOCH DROP_LAST (0/1 flags). Output: one line of
space-separated indices per input line ("-" for an empty list).
"""
import sys

from torch.utils.data import DistributedSampler


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def main(path):
    out = []
    for line in open(path):
        n, world, rank, shuffle, seed, epoch, drop_last = map(int, line.split())
        s = DistributedSampler(Sized(n), num_replicas=world, rank=rank, shuffle=bool(shuffle),
                               seed=seed, drop_last=bool(drop_last))
        s.set_epoch(epoch)
        idx = list(s)
        assert len(idx) == len(s)
        out.append(" ".join(map(str, idx)) if idx else "-")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
