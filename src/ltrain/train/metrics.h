// metrics.jsonl: one JSON object per report, appended and flushed as it happens.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

#include "ltrain/io/json.h"

namespace ltrain::train {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens for appending; when resuming from `resume_step`, records of later steps (written after
  // that checkpoint by the run that died) are dropped first, so the log reads as one clean run.
  void open(const std::string& path, int64_t resume_step);
  void write(const io::JsonObject& record);
  bool isOpen() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

}  // namespace ltrain::train
