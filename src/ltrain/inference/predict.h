// `ltrain predict`: a trained classifier's predictions for new inputs, one CSV row each, read as
// the config's dataset reads them: images (a class-folder tree, a folder of images, one image or
// a path,label manifest) through the evaluation transform, or a table with train.csv's columns
// standardised as in training.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ltrain::inference {

struct PredictRequest {
  std::string config;
  std::vector<std::string> overrides;
  std::string checkpoint;  // a .pt checkpoint or a model.safetensors
  std::string input;
  std::string output = "predictions.csv";
  int64_t top_k = 1;
  bool overwrite = false;  // replace an existing --output
};

struct PredictSummary {
  int64_t rows = 0, labelled = 0, correct = 0, skipped = 0;
};

// Writes --output: input,label,prediction,probability[,top2,probability2,...]. `label` is the
// input's known class (its class folder or manifest label; a table's label column), empty where
// there is none. UsageError naming the input, checkpoint or output for what cannot work.
PredictSummary runPredict(const PredictRequest& req);

}  // namespace ltrain::inference
