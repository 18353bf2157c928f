// One ELF file's function symbols (.dynsym and .symtab), load segments and USDT notes: what attaching a uprobe
// (name -> file offset) and naming a code address (kernel host stubs) need. Names carry no version suffix
// (`cudaLaunchKernel@@libcudart.so.13` is `cudaLaunchKernel`).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stackscope::trace {

struct ElfSymbol {
  std::string_view name;  // points into the image's string table (valid while the ElfImage lives)
  uint64_t vaddr = 0;
  uint64_t size = 0;
  bool weak = false;
};

struct UsdtNote {
  std::string provider, name;
};

class ElfImage {
 public:
  // Opens `path`; throws std::runtime_error naming the file when it is not a readable ELF.
  static std::shared_ptr<ElfImage> open(const std::string& path);
  ~ElfImage();
  ElfImage(const ElfImage&) = delete;
  ElfImage& operator=(const ElfImage&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<ElfSymbol>& symbols() const { return symbols_; }  // sorted by vaddr, one per address
  // A defined function symbol by name; global binding preferred over weak for the same name.
  const ElfSymbol* find(std::string_view name) const;
  // The function symbol whose range covers `vaddr` (or the nearest below when sizes are 0).
  const ElfSymbol* symbol_at(uint64_t vaddr) const;
  // Virtual address <-> file offset through the PT_LOAD segments (uprobes take file offsets).
  std::optional<uint64_t> vaddr_to_offset(uint64_t vaddr) const;
  std::optional<uint64_t> offset_to_vaddr(uint64_t offset) const;
  bool has_usdt(std::string_view provider, std::string_view name) const;
  // A defined data object (STT_OBJECT: `_PyRuntime`, `Py_Version`) by name: its vaddr. Searched on demand, not
  // kept: only the python stack sampler asks, once per interpreter file.
  std::optional<uint64_t> find_object(std::string_view name) const;
  // `size` bytes of the file's contents at `vaddr` (initialised data only); nullopt outside the file.
  std::optional<std::string> read_at(uint64_t vaddr, size_t size) const;
  // The contents of section `name` (".rodata"), valid while the image lives; empty when absent or not in the file.
  std::string_view section(std::string_view name) const;
  // Every name an address carries (a weak alias and its strong target share one address).
  const std::vector<std::pair<std::string_view, uint64_t>>& all_names() const { return all_names_; }

 private:
  ElfImage() = default;
  void load();
  struct Segment {
    uint64_t vaddr, offset, filesz;
  };
  std::string path_;
  int fd_ = -1;
  void* elf_ = nullptr;  // Elf*, kept open: symbol names point into its string tables
  std::vector<ElfSymbol> symbols_;
  std::vector<std::pair<std::string_view, uint64_t>> all_names_;  // (name, vaddr) of every defined function
  std::unordered_map<std::string_view, size_t> by_name_;          // index into all_names_
  std::vector<Segment> segments_;
  std::vector<UsdtNote> usdt_;
};

// Images by file identity (device, inode), so each file is parsed once however many processes map it.
class ElfCache {
 public:
  std::shared_ptr<ElfImage> get(const std::string& host_path);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<ElfImage>> by_id_;
};

}  // namespace stackscope::trace
