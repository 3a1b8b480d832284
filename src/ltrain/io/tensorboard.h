// Scalars for TensorBoard, written as a TFRecord file of tensorflow.Event protos that TensorBoard
// reads directly (no TensorFlow or protobuf needed on either side of the writer).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ltrain::io {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<unix seconds>.<hostname> file in it. Throws
  // std::runtime_error naming the path when either cannot be created.
  explicit TensorBoardWriter(const std::string& dir);

  // `wall_time` is seconds since the Unix epoch. Values are stored as float32, as TensorBoard's
  // simple_value is; nan and inf are written unchanged (TensorBoard shows them as such). Steps
  // must not go backwards: TensorBoard takes a smaller step as a restart and drops later points.
  // Throws std::runtime_error naming the file when it cannot be written.
  void scalar(const std::string& tag, int64_t step, double value, double wall_time);
  // One event holding every value, so a reader sees them at the same step and wall time.
  void scalars(int64_t step, double wall_time,
               const std::vector<std::pair<std::string, double>>& values);
  void flush();
  // Marks a restart at `step` (a resumed run): TensorBoard drops the points written earlier at
  // `step` or later, as metrics.jsonl drops its records after the checkpoint.
  void sessionStart(int64_t step, double wall_time);

  const std::string& path() const { return path_; }

 private:
  void writeRecord(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace ltrain::io
