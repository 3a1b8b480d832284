// Tabular data from CSV: data.path holds train.csv and test.csv, each with a header row; the
// column named by data.label_column holds the class (any text: the training file's distinct
// labels, sorted, become classes 0..K-1), every other column a number. Features are standardised
// with the training file's per-column mean and standard deviation.
#pragma once
#include <string>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

// UsageError naming the file, line and column for a missing file or label column, a ragged row,
// a value that is not a number, or a test label the training file never had.
Splits loadCsv(const std::string& dir, const std::string& label_column);

}  // namespace ltrain::data
