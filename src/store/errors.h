#pragma once
#include <stdexcept>
#include <string>

namespace stackscope {

// A recording that cannot be opened or decoded: the message names the file and what is wrong with it.
class RecordingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stackscope
