// Tabular data from CSV: data.path holds train.csv and test.csv, each with a header row; the
// column named by data.label_column holds the class (any text: the training file's distinct
// labels, sorted, become classes 0..K-1), every other column a number. Features are standardised
// with the training file's per-column mean and standard deviation.
#pragma once
#include <string>
#include <vector>

#include "ltrain/data/dataset.h"

namespace ltrain::data {

// UsageError naming the file, line and column for a missing file or label column, a ragged row,
// a value that is not a number, or a test label the training file never had.
// Splits::class_names holds the labels as written, in class order.
Splits loadCsv(const std::string& dir, const std::string& label_column);

// ltrain predict: the rows of the table at `path`, whose columns are train.csv's (the label
// column may be left out), standardised as training standardised them: [N, F] float. `labels`
// receives each row's label as written ("" where the table has no label column).
torch::Tensor readCsvInputs(const std::string& dir, const std::string& label_column,
                            const std::string& path, std::vector<std::string>& labels);

}  // namespace ltrain::data
