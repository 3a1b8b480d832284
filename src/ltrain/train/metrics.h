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
  // Opens for appending; records of steps after `resume_step` (written after that checkpoint by
  // a run that died; all of them when starting from step 0) are dropped first, so the log reads
  // as one clean run. A negative `resume_step` keeps everything.
  void open(const std::string& path, int64_t resume_step);
  void write(const io::Json& record);
  bool isOpen() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

}  // namespace ltrain::train
