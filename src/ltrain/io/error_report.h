// How a failure leaves the process: one "ltrain: error: ..." line on stderr and, under a launcher,
// torchrun's error file (TORCHELASTIC_ERROR_FILE), which the launcher reads for its report.
#pragma once
#include <string>

namespace ltrain {

void reportError(const std::string& message);
// A file the error line is appended to as well (a rank's own log under srun or mpirun).
void setErrorLog(const std::string& path);

}  // namespace ltrain
