#include "trace/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace stackscope::trace {

std::shared_ptr<ElfImage> ElfImage::open(const std::string& path) {
  std::shared_ptr<ElfImage> img(new ElfImage());
  img->path_ = path;
  img->load();
  return img;
}

ElfImage::~ElfImage() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// An Elf handle over a temporary read-only mapping of the file: elf_end unmaps it, so the pages touched (symbol and
// string tables) leave the process's RSS with it.
struct ElfReader {
  Elf* elf = nullptr;
  ElfReader(int fd, const std::string& path) {
    elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
      if (elf) elf_end(elf);
      throw std::runtime_error(path + ": not an ELF file");
    }
  }
  ~ElfReader() { elf_end(elf); }
  ElfReader(const ElfReader&) = delete;
  ElfReader& operator=(const ElfReader&) = delete;
};

std::string_view without_version(std::string_view name) {
  if (auto at = name.find('@'); at != std::string_view::npos) return name.substr(0, at);  // cudaX@@libcudart.so.13
  return name;
}

bool is_function(int type) { return type == STT_FUNC || type == STT_GNU_IFUNC; }

// An index's build leaves as much freed heap as it keeps (the list before sorting, the growth of vectors): handed
// back to the system rather than left in the tracer's RSS.
void release_free_heap() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

}  // namespace

void ElfImage::load() {
  if (elf_version(EV_CURRENT) == EV_NONE) throw std::runtime_error("libelf: version mismatch");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open: " + std::strerror(errno));
  ElfReader reader(fd_, path_);
  Elf* elf = reader.elf;
  size_t nphdr = 0;
  elf_getphdrnum(elf, &nphdr);
  for (size_t i = 0; i < nphdr; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      segments_.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
  }
  size_t shstrndx = 0;
  elf_getshdrstrndx(elf, &shstrndx);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    const char* sname = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!sname || std::strcmp(sname, ".note.stapsdt") != 0) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    GElf_Nhdr nh;
    size_t off = 0, name_off = 0, desc_off = 0;
    while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type != 3 || desc_off + nh.n_descsz > data->d_size) continue;
      // desc: pc, base, semaphore (3 addresses), then provider\0name\0args\0
      const char* d = static_cast<const char*>(data->d_buf) + desc_off;
      size_t addr_bytes = 3 * (gelf_getclass(elf) == ELFCLASS64 ? 8 : 4);
      if (nh.n_descsz <= addr_bytes) continue;
      std::string_view rest(d + addr_bytes, nh.n_descsz - addr_bytes);
      auto z1 = rest.find('\0');
      if (z1 == std::string_view::npos) continue;
      auto z2 = rest.find('\0', z1 + 1);
      if (z2 == std::string_view::npos) continue;
      usdt_.push_back({std::string(rest.substr(0, z1)), std::string(rest.substr(z1 + 1, z2 - z1 - 1))});
    }
  }
}

void ElfImage::for_each_symbol(const std::function<void(const RawSymbol&)>& visit) const {
  ElfReader reader(fd_, path_);
  Elf* elf = reader.elf;
  // Symbols are visited in the order of their names in the string table, and the pages of the mapping read so far
  // are dropped every so many symbols (they come back from the page cache if touched again): pip's libtorch_cpu has
  // ~100 MB of symbol and string tables, and the linker's string table order is not the symbol table's, so in the
  // symbol table's order every page of names would be resident at once.
  size_t file_size = 0;
  char* file = elf_rawfile(elf, &file_size);
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  auto drop_pages = [&](uint64_t offset, uint64_t size) {
    const uint64_t begin = (offset + page - 1) / page * page;
    const uint64_t end = std::min<uint64_t>(offset + size, file_size) / page * page;
    if (file && begin < end) ::madvise(file + begin, end - begin, MADV_DONTNEED);
  };
  constexpr size_t kSymbolsBetweenDrops = 1 << 15;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || sh.sh_entsize == 0)
      continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    GElf_Shdr strtab;
    if (!data || !gelf_getshdr(elf_getscn(elf, sh.sh_link), &strtab)) continue;
    std::vector<std::pair<uint32_t, uint32_t>> by_name_offset;  // (st_name, index)
    for (size_t i = 0, n = sh.sh_size / sh.sh_entsize; i < n && i <= UINT32_MAX; ++i) {
      GElf_Sym s;
      if (gelf_getsym(data, static_cast<int>(i), &s) && s.st_name != 0)
        by_name_offset.emplace_back(s.st_name, static_cast<uint32_t>(i));
    }
    std::sort(by_name_offset.begin(), by_name_offset.end());
    const uint64_t section_order = static_cast<uint64_t>(elf_ndxscn(scn)) << 32;
    for (size_t k = 0; k < by_name_offset.size(); ++k) {
      if (k % kSymbolsBetweenDrops == kSymbolsBetweenDrops - 1) {
        drop_pages(sh.sh_offset, sh.sh_size);
        drop_pages(strtab.sh_offset, strtab.sh_size);
      }
      const uint32_t i = by_name_offset[k].second;
      GElf_Sym s;
      if (!gelf_getsym(data, static_cast<int>(i), &s)) continue;
      const char* name = elf_strptr(elf, sh.sh_link, s.st_name);
      if (!name || !*name) continue;
      visit({name, s.st_value, s.st_size, strtab.sh_offset + s.st_name, section_order | i, GELF_ST_TYPE(s.st_info),
             s.st_shndx != SHN_UNDEF && s.st_value != 0, GELF_ST_BIND(s.st_info) == STB_WEAK});
    }
  }
}

void ElfImage::for_each_function(const std::function<void(std::string_view, uint64_t)>& visit) const {
  for_each_symbol([&](const RawSymbol& s) {
    if (s.defined && is_function(s.type)) visit(without_version(s.name), s.vaddr);
  });
}

void ElfImage::build_by_address() const {
  std::call_once(by_address_once_, [this] {
    std::vector<std::pair<ElfSymbol, uint64_t>> found;  // (symbol, file order)
    for_each_symbol([&](const RawSymbol& s) {
      if (s.defined && is_function(s.type))
        found.push_back(
            {{s.vaddr, s.name_at, static_cast<uint32_t>(std::min<uint64_t>(s.size, UINT32_MAX)), s.weak}, s.order});
    });
    // One symbol per address for address -> name: prefer strong, sized names (pncclX over its weak ncclX alias),
    // then the first in the file.
    std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) {
      const ElfSymbol &a = x.first, &b = y.first;
      if (a.vaddr != b.vaddr) return a.vaddr < b.vaddr;
      if (a.weak != b.weak) return !a.weak;
      return a.size != b.size ? a.size > b.size : x.second < y.second;
    });
    std::vector<ElfSymbol> raw;
    raw.reserve(found.size());
    for (auto& f : found) raw.push_back(f.first);
    found = {};
    auto same_address = [](const ElfSymbol& a, const ElfSymbol& b) { return a.vaddr == b.vaddr; };
    raw.erase(std::unique(raw.begin(), raw.end(), same_address), raw.end());
    raw.shrink_to_fit();
    by_address_ = std::move(raw);
    release_free_heap();
  });
}

void ElfImage::build_by_name() const {
  std::call_once(by_name_once_, [this] {
    std::vector<NameKey> keys;
    for_each_symbol([&](const RawSymbol& s) {
      if (s.defined && is_function(s.type))
        keys.push_back({std::hash<std::string_view>{}(without_version(s.name)), s.vaddr, s.name_at, s.order, s.weak});
    });
    // Equal hashes: strong before weak, then the file's order (the first strong definition of a name wins).
    std::sort(keys.begin(), keys.end(), [](const NameKey& a, const NameKey& b) {
      if (a.hash != b.hash) return a.hash < b.hash;
      if (a.weak != b.weak) return !a.weak;
      return a.order < b.order;
    });
    keys.shrink_to_fit();
    by_name_ = std::move(keys);
    release_free_heap();
  });
}

const std::vector<ElfSymbol>& ElfImage::symbols() const {
  build_by_address();
  return by_address_;
}

const ElfSymbol* ElfImage::find(std::string_view name) const {
  build_by_name();
  const uint64_t hash = std::hash<std::string_view>{}(name);
  auto first = std::lower_bound(by_name_.begin(), by_name_.end(), hash,
                                [](const NameKey& k, uint64_t h) { return k.hash < h; });
  for (auto it = first; it != by_name_.end() && it->hash == hash; ++it) {
    // A hash is not a name: the candidate's name is read back from the file to confirm it.
    if (name_of(ElfSymbol{it->vaddr, it->name_at, 0, it->weak}) != name) continue;
    const auto& by_address = symbols();
    auto pos = std::lower_bound(by_address.begin(), by_address.end(), it->vaddr,
                                [](const ElfSymbol& s, uint64_t v) { return s.vaddr < v; });
    return (pos != by_address.end() && pos->vaddr == it->vaddr) ? &*pos : nullptr;
  }
  return nullptr;
}

std::string ElfImage::name_of(const ElfSymbol& sym) const {
  // Mangled C++ names run to a few kB; read in pieces until the NUL.
  std::string name;
  char buf[256];
  for (uint64_t at = sym.name_at; name.size() < (1u << 20);) {
    const ssize_t n = ::pread(fd_, buf, sizeof buf, static_cast<off_t>(at));
    if (n <= 0) break;
    const auto* end = static_cast<const char*>(std::memchr(buf, '\0', static_cast<size_t>(n)));
    name.append(buf, end ? static_cast<size_t>(end - buf) : static_cast<size_t>(n));
    if (end) break;
    at += static_cast<uint64_t>(n);
  }
  return std::string(without_version(name));
}

std::optional<uint64_t> ElfImage::find_object(std::string_view name) const {
  std::optional<uint64_t> found;
  for_each_symbol([&](const RawSymbol& s) {
    if (!found && s.type == STT_OBJECT && s.defined && s.name == name) found = s.vaddr;
  });
  return found;
}

void ElfImage::with_section(std::string_view name, const std::function<void(std::string_view)>& use) const {
  ElfReader reader(fd_, path_);
  Elf* elf = reader.elf;
  size_t shstrndx = 0;
  std::string_view contents;
  if (elf_getshdrstrndx(elf, &shstrndx) == 0)
    for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS) continue;
      const char* sname = elf_strptr(elf, shstrndx, sh.sh_name);
      if (!sname || name != sname) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);  // in the temporary mapping: no copy
      if (data && data->d_buf) contents = std::string_view(static_cast<const char*>(data->d_buf), data->d_size);
      break;
    }
  use(contents);
}

std::optional<std::string> ElfImage::read_at(uint64_t vaddr, size_t size) const {
  for (auto& s : segments_) {
    if (vaddr < s.vaddr || vaddr + size > s.vaddr + s.filesz) continue;
    std::string out(size, '\0');
    if (::pread(fd_, out.data(), size, static_cast<off_t>(vaddr - s.vaddr + s.offset)) != static_cast<ssize_t>(size))
      return std::nullopt;
    return out;
  }
  return std::nullopt;
}

const ElfSymbol* ElfImage::symbol_at(uint64_t vaddr) const {
  const auto& by_address = symbols();
  auto pos = std::upper_bound(by_address.begin(), by_address.end(), vaddr,
                              [](uint64_t v, const ElfSymbol& s) { return v < s.vaddr; });
  if (pos == by_address.begin()) return nullptr;
  --pos;
  if (pos->size && vaddr >= pos->vaddr + pos->size) return nullptr;
  return &*pos;
}

std::optional<uint64_t> ElfImage::vaddr_to_offset(uint64_t vaddr) const {
  for (auto& s : segments_)
    if (vaddr >= s.vaddr && vaddr < s.vaddr + s.filesz) return vaddr - s.vaddr + s.offset;
  return std::nullopt;
}

std::optional<uint64_t> ElfImage::offset_to_vaddr(uint64_t offset) const {
  for (auto& s : segments_)
    if (offset >= s.offset && offset < s.offset + s.filesz) return offset - s.offset + s.vaddr;
  return std::nullopt;
}

bool ElfImage::has_usdt(std::string_view provider, std::string_view name) const {
  for (auto& n : usdt_)
    if (n.provider == provider && n.name == name) return true;
  return false;
}

std::shared_ptr<ElfImage> ElfCache::get(const std::string& host_path) {
  struct stat st {};
  if (::stat(host_path.c_str(), &st) != 0) throw std::runtime_error(host_path + ": " + std::strerror(errno));
  std::string id = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                   std::to_string(st.st_mtim.tv_sec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = by_id_.find(id); it != by_id_.end()) return it->second;
  }
  auto img = ElfImage::open(host_path);  // parse outside the lock: libtorch_cpu takes a while
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.emplace(id, std::move(img)).first->second;
}

}  // namespace stackscope::trace
