// One ELF file's function symbols (.dynsym and .symtab), load segments and USDT notes: what attaching a uprobe
// (name -> file offset) and naming a code address (kernel host stubs) need. Names carry no version suffix
// (`cudaLaunchKernel@@libcudart.so.13` is `cudaLaunchKernel`).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace stackscope::trace {

// Large libraries (pip's libtorch_cpu: hundreds of thousands of symbols, ~100 MB of names) cost memory in proportion
// to their symbol tables, so an image keeps no names and no mapping of the file: the tables are read from the file
// when needed (a temporary mapping, unmapped before returning), the name of a symbol is read back by its file
// offset (`name_of`), and the address and name indexes are built only for the images that are asked by address or
// by name (libtorch_cpu never is: its operators are found by one pass of for_each_function).
struct ElfSymbol {
  uint64_t vaddr = 0;
  uint64_t name_at = 0;  // file offset of the NUL-terminated name (ElfImage::name_of reads it)
  uint32_t size = 0;
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
  // Function symbols sorted by vaddr, one per address (built on first use).
  const std::vector<ElfSymbol>& symbols() const;
  // A defined function symbol by name; global binding preferred over weak for the same name (index built on first
  // use). Aliases resolve to the symbol that symbols() keeps for their address.
  const ElfSymbol* find(std::string_view name) const;
  // The function symbol whose range covers `vaddr` (or the nearest below when sizes are 0).
  const ElfSymbol* symbol_at(uint64_t vaddr) const;
  // A symbol's name, without version suffix (`cudaLaunchKernel@@libcudart.so.13` is `cudaLaunchKernel`), read
  // from the file.
  std::string name_of(const ElfSymbol& sym) const;
  // Every defined function name (aliases included, version suffix cut) with its vaddr, read from the file in one
  // pass in the string table's order (not the symbol table's); nothing is kept. `visit`'s name is valid during the
  // call only.
  void for_each_function(const std::function<void(std::string_view name, uint64_t vaddr)>& visit) const;
  // Virtual address <-> file offset through the PT_LOAD segments (uprobes take file offsets).
  std::optional<uint64_t> vaddr_to_offset(uint64_t vaddr) const;
  std::optional<uint64_t> offset_to_vaddr(uint64_t offset) const;
  bool has_usdt(std::string_view provider, std::string_view name) const;
  // A defined data object (STT_OBJECT: `_PyRuntime`, `Py_Version`) by name: its vaddr. Searched on demand, not
  // kept: only the python stack sampler asks, once per interpreter file.
  std::optional<uint64_t> find_object(std::string_view name) const;
  // `size` bytes of the file's contents at `vaddr` (initialised data only); nullopt outside the file.
  std::optional<std::string> read_at(uint64_t vaddr, size_t size) const;
  // Calls `use` with the contents of section `name` (".rodata"; empty when absent or not in the file), read through
  // a temporary mapping of the file that is unmapped before returning (as for_each_symbol's).
  void with_section(std::string_view name, const std::function<void(std::string_view)>& use) const;

 private:
  ElfImage() = default;
  void load();
  // A symbol table entry as for_each_symbol passes it.
  struct RawSymbol {
    std::string_view name;  // version suffix not cut
    uint64_t vaddr, size, name_at;
    uint64_t order;  // the symbol's place in the file (section, index): visits are in string table order
    int type;  // STT_*
    bool defined, weak;
  };
  // Calls visit for every named symbol of .symtab and .dynsym, in each table's string order, read through a temporary
  // mapping of the file that is unmapped before returning (its pages are not left in the tracer's RSS).
  void for_each_symbol(const std::function<void(const RawSymbol&)>& visit) const;
  void build_by_address() const;
  void build_by_name() const;
  struct Segment {
    uint64_t vaddr, offset, filesz;
  };
  struct NameKey {
    uint64_t hash, vaddr, name_at, order;
    bool weak;
  };
  std::string path_;
  int fd_ = -1;  // kept open: names are read back from it, also after the process that mapped it is gone
  std::vector<Segment> segments_;
  std::vector<UsdtNote> usdt_;
  mutable std::once_flag by_address_once_, by_name_once_;
  mutable std::vector<ElfSymbol> by_address_;
  mutable std::vector<NameKey> by_name_;  // sorted by hash; one per name (strong preferred)
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
