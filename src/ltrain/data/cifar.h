// The CIFAR-10 and CIFAR-100 binary formats, as distributed by their authors: records of label
// byte(s) then 3072 pixel bytes (1024 red, 1024 green, 1024 blue, row-major 32x32).
//   CIFAR-10:  data_batch_1.bin .. data_batch_5.bin, test_batch.bin; one label byte (0..9).
//   CIFAR-100: train.bin, test.bin; a coarse then a fine label byte (the fine one, 0..99, is used).
#pragma once
#include <string>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

// Reads the directory's train and test files. UsageError naming the file for a missing file, a
// size that is not a whole number of records, or a label out of range.
Splits loadCifar(const std::string& dir, int classes);

}  // namespace ltrain::data
