// Writing an output without destroying data: every command that writes a file opens it here.
//  - a symbolic link at the output path is refused, never followed (as root that would overwrite its target);
//  - an output that is one of the command's inputs (same device and inode, whatever the name) is refused;
//  - the data goes to a temporary file beside the path (same folder: the rename is atomic) that commit() renames
//    over it, so a command that fails half-way leaves whatever was at the path untouched;
//  - a recording that must survive kill -9 (record) is written in place when its path is new, created with
//    O_EXCL, and holds an exclusive flock, so a second recorder refuses a path in use.
#pragma once
#include <sys/types.h>

#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace stackscope {

struct OutputFileOptions {
  std::vector<std::string> inputs;  // files the command reads: refused as the output
  mode_t mode = 0666;               // of a created file: 0666 less the umask; any other mode exactly (recordings)
  bool replace = true;              // false: an existing file is refused ("--force" lifts it)
  bool in_place_when_new = false;   // a new path is written where it is (no temporary, no rename)
  bool lock = false;                // hold an exclusive flock on the path while this object lives
  bool sqlite = false;              // a SQLite database: its -wal and -shm files go and come with it
  bool keep_unfinished = false;     // the destructor (without commit) keeps what was written, as kill -9 would
  std::string what = "output";      // names the output in messages ("recording", "--html")
};

// Throws std::invalid_argument when `path` is a symbolic link, a directory or other non-regular file (a
// character device such as /dev/null and a pipe pass), or the same file as one of `inputs`. A path that does
// not exist passes.
void check_output_path(const std::string& path, const std::vector<std::string>& inputs,
                       const std::string& what = "output");

class OutputFile {
 public:
  // Checks the path (check_output_path, replace, lock) and creates the file to write (O_EXCL | O_NOFOLLOW).
  // Throws std::invalid_argument for a refused path, std::runtime_error when the file cannot be created.
  explicit OutputFile(std::string path, OutputFileOptions options = {});
  // Without commit(): the temporary is removed (unless keep_unfinished); a file written in place stays.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  const std::string& path() const { return path_; }
  // Where the data goes: the temporary beside path(), or path() itself when written in place. For writers that
  // open by name (SQLite): the file exists, empty, with the requested mode.
  const std::string& write_path() const { return write_path_; }
  bool in_place() const { return write_path_ == path_; }
  // A stream over the created file (text outputs).
  std::ostream& stream();
  // Flushes and closes the stream, renames the temporary over path() (with its -wal/-shm leftovers removed
  // first: a stale WAL must not be replayed into the new file). Throws std::runtime_error when writing failed.
  void commit();
  // Removes what was written, also a file written in place (the old file, if any, stays).
  void discard();

 private:
  struct Stream;
  std::string path_, write_path_;
  int fd_ = -1, lock_fd_ = -1;
  std::unique_ptr<Stream> stream_;
  bool sqlite_ = false, keep_unfinished_ = false, created_ = false;
  bool done_ = false;
};

}  // namespace stackscope
