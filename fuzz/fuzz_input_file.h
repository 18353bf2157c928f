// The fuzz input as a file, for readers that take a path: written under /tmp with the given suffix (readers
// look at names: ".json", ".gz"), removed when the object goes.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

class FuzzInputFile {
 public:
  FuzzInputFile(const uint8_t* data, size_t size, const char* suffix) {
    path_ = std::string("/tmp/stackscope-fuzz-XXXXXX") + suffix;
    const int fd = ::mkstemps(path_.data(), static_cast<int>(std::char_traits<char>::length(suffix)));
    if (fd < 0) {
      path_.clear();
      return;
    }
    (void)!::write(fd, data, size);
    ::close(fd);
  }
  ~FuzzInputFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};
