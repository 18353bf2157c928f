#include "store/output_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ext/stdio_filebuf.h>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace stackscope {

struct OutputFile::Stream {
  explicit Stream(int fd) : buf(fd, std::ios::out | std::ios::binary), os(&buf) {}
  __gnu_cxx::stdio_filebuf<char> buf;  // owns the descriptor
  std::ostream os;
};

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void remove_sqlite_companions(const std::string& path) {
  ::unlink((path + "-wal").c_str());
  ::unlink((path + "-shm").c_str());
  ::unlink((path + "-reserve").c_str());  // the recording writer's disk reserve (recording_writer.cpp)
}

}  // namespace

void check_output_path(const std::string& path, const std::vector<std::string>& inputs, const std::string& what) {
  if (path.empty()) throw std::invalid_argument(what + ": empty path");
  struct stat out{};
  if (::lstat(path.c_str(), &out) != 0) {
    if (errno == ENOENT) return;
    throw std::invalid_argument(fmt::format("{} {}: {}", what, path, errno_text()));
  }
  if (S_ISLNK(out.st_mode))
    throw std::invalid_argument(fmt::format(
        "{} {} is a symbolic link: refusing to write through it (it would overwrite its target); remove it or "
        "name the target itself",
        what, path));
  if (S_ISCHR(out.st_mode) || S_ISFIFO(out.st_mode)) return;  // /dev/null, a pipe: written as they are
  if (!S_ISREG(out.st_mode))
    throw std::invalid_argument(fmt::format("{} {} is not a regular file", what, path));
  for (const std::string& input : inputs) {
    struct stat in{};
    if (::stat(input.c_str(), &in) != 0) continue;
    if (in.st_dev == out.st_dev && in.st_ino == out.st_ino)
      throw std::invalid_argument(fmt::format(
          "{} {} is also an input of this command ({}): refusing to overwrite it", what, path, input));
  }
}

OutputFile::OutputFile(std::string path, OutputFileOptions o) : path_(std::move(path)) {
  check_output_path(path_, o.inputs, o.what);
  struct stat st{};
  const bool exists = ::lstat(path_.c_str(), &st) == 0;
  if (exists && !o.replace)
    throw std::invalid_argument(fmt::format("{} {} exists: refusing to replace it (pass --force to replace it)",
                                            o.what, path_));
  if (o.lock && exists) {
    // A recorder holds an flock on its path: a second one (even with --force) must not replace it under it.
    lock_fd_ = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (lock_fd_ < 0) throw std::runtime_error(fmt::format("{} {}: {}", o.what, path_, errno_text()));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(lock_fd_);
      lock_fd_ = -1;
      throw std::invalid_argument(fmt::format("{} {} is in use by another recorder", o.what, path_));
    }
  }
  if (exists && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // /dev/null or a pipe: nothing to replace, nothing to rename; written directly (and never removed).
    fd_ = ::open(path_.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(fmt::format("cannot write {} {}: {}", o.what, path_, errno_text()));
    write_path_ = path_;
    return;
  }
  sqlite_ = o.sqlite;
  keep_unfinished_ = o.keep_unfinished;
  if (!exists && o.in_place_when_new) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, o.mode);
    if (fd_ < 0) {
      if (errno == EEXIST)
        throw std::invalid_argument(fmt::format("{} {} was created by another process just now: refusing it", o.what,
                                                path_));
      throw std::runtime_error(fmt::format("cannot create {} {}: {}", o.what, path_, errno_text()));
    }
    write_path_ = path_;
    created_ = true;
    if (o.mode != 0666) ::fchmod(fd_, o.mode);  // asked for: whatever the umask
    if (sqlite_) remove_sqlite_companions(path_);  // stale ones of a file deleted alone would be replayed
    if (o.lock && ::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      discard();
      throw std::invalid_argument(fmt::format("{} {} is in use by another recorder", o.what, path_));
    }
    return;
  }
  // Beside the path, in the same folder (an atomic rename); O_EXCL | O_NOFOLLOW: never someone else's file.
  std::random_device rd;
  const std::string base = path_ + ".partial-";
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string candidate = base + fmt::format("{:06x}", rd() & 0xffffff);
    fd_ = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, o.mode);
    if (fd_ >= 0) {
      write_path_ = std::move(candidate);
      created_ = true;
      if (o.mode != 0666) ::fchmod(fd_, o.mode);
      return;
    }
    if (errno != EEXIST) break;
  }
  const std::string why = errno_text();
  if (lock_fd_ >= 0) ::close(lock_fd_);
  throw std::runtime_error(fmt::format("cannot create a file in {} for {} {}: {}", parent_of(path_), o.what, path_,
                                       why));
}

OutputFile::~OutputFile() {
  if (!in_place() && !keep_unfinished_) discard();
  if (fd_ >= 0) ::close(fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::ostream& OutputFile::stream() {
  if (!stream_) {
    if (fd_ < 0) throw std::logic_error("OutputFile::stream after commit");
    stream_ = std::make_unique<Stream>(fd_);
    fd_ = -1;  // the stream owns it now
  }
  return stream_->os;
}

void OutputFile::commit() {
  if (done_) return;
  if (stream_) {
    stream_->os.flush();
    const bool ok = stream_->os.good() && stream_->buf.close() != nullptr;
    stream_.reset();
    if (!ok) throw std::runtime_error("write failed: " + path_ + " (left as it was)");
  }
  // Written in place, the descriptor stays open (it holds the flock) until this object goes, after the
  // writer closed: closing a descriptor of a file while SQLite holds POSIX locks on it would drop them.
  if (fd_ >= 0 && !in_place()) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!in_place()) {
    if (sqlite_) remove_sqlite_companions(path_);
    if (::rename(write_path_.c_str(), path_.c_str()) != 0)
      throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", write_path_, path_, errno_text()));
  }
  done_ = true;
}

void OutputFile::discard() {
  if (done_) return;
  done_ = true;
  stream_.reset();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!created_) return;  // never a file this object did not create (/dev/null)
  ::unlink(write_path_.c_str());
  if (sqlite_) remove_sqlite_companions(write_path_);
}

}  // namespace stackscope
