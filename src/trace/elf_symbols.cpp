#include "trace/elf_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
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
  if (elf_) elf_end(static_cast<Elf*>(elf_));
  if (fd_ >= 0) ::close(fd_);
}

void ElfImage::load() {
  if (elf_version(EV_CURRENT) == EV_NONE) throw std::runtime_error("libelf: version mismatch");
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot open: " + std::strerror(errno));
  Elf* elf = elf_begin(fd_, ELF_C_READ_MMAP, nullptr);
  if (!elf || elf_kind(elf) != ELF_K_ELF) {
    if (elf) elf_end(elf);
    throw std::runtime_error(path_ + ": not an ELF file");
  }
  elf_ = elf;
  size_t nphdr = 0;
  elf_getphdrnum(elf, &nphdr);
  for (size_t i = 0; i < nphdr; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      segments_.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
  }
  size_t shstrndx = 0;
  elf_getshdrstrndx(elf, &shstrndx);
  std::vector<ElfSymbol> raw;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    if (sh.sh_type == SHT_NOTE) {
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
      continue;
    }
    if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data || sh.sh_entsize == 0) continue;
    size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(data, static_cast<int>(i), &s)) continue;
      int type = GELF_ST_TYPE(s.st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
      const char* name = elf_strptr(elf, sh.sh_link, s.st_name);
      if (!name || !*name) continue;
      std::string_view nv(name);
      if (auto at = nv.find('@'); at != std::string_view::npos) nv = nv.substr(0, at);  // cudaX@@libcudart.so.13
      raw.push_back({nv, s.st_value, s.st_size, GELF_ST_BIND(s.st_info) == STB_WEAK});
    }
  }
  // by_name_ indexes all_names_, which keeps raw's pre-sort order.
  for (auto& s : raw) all_names_.emplace_back(s.name, s.vaddr);
  for (size_t i = 0; i < raw.size(); ++i) {
    auto [it, inserted] = by_name_.emplace(raw[i].name, i);
    if (!inserted && raw[it->second].weak && !raw[i].weak) it->second = i;
  }
  // One symbol per address for address -> name: prefer strong, sized names (pncclX over its weak ncclX alias).
  std::sort(raw.begin(), raw.end(), [](const ElfSymbol& a, const ElfSymbol& b) {
    if (a.vaddr != b.vaddr) return a.vaddr < b.vaddr;
    if (a.weak != b.weak) return !a.weak;
    return a.size > b.size;
  });
  for (auto& s : raw)
    if (symbols_.empty() || symbols_.back().vaddr != s.vaddr) symbols_.push_back(s);
}

const ElfSymbol* ElfImage::find(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  uint64_t vaddr = all_names_[it->second].second;
  auto pos = std::lower_bound(symbols_.begin(), symbols_.end(), vaddr,
                              [](const ElfSymbol& s, uint64_t v) { return s.vaddr < v; });
  return (pos != symbols_.end() && pos->vaddr == vaddr) ? &*pos : nullptr;
}

std::optional<uint64_t> ElfImage::find_object(std::string_view name) const {
  Elf* elf = static_cast<Elf*>(elf_);
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || sh.sh_entsize == 0)
      continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) continue;
    for (size_t i = 0, n = sh.sh_size / sh.sh_entsize; i < n; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(data, static_cast<int>(i), &s) || GELF_ST_TYPE(s.st_info) != STT_OBJECT ||
          s.st_shndx == SHN_UNDEF || s.st_value == 0)
        continue;
      const char* sym = elf_strptr(elf, sh.sh_link, s.st_name);
      if (sym && name == sym) return s.st_value;
    }
  }
  return std::nullopt;
}

std::string_view ElfImage::section(std::string_view name) const {
  Elf* elf = static_cast<Elf*>(elf_);
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return {};
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS) continue;
    const char* sname = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!sname || name != sname) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);  // mapped (ELF_C_READ_MMAP): no copy
    return data && data->d_buf ? std::string_view(static_cast<const char*>(data->d_buf), data->d_size)
                               : std::string_view{};
  }
  return {};
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
  auto pos = std::upper_bound(symbols_.begin(), symbols_.end(), vaddr,
                              [](uint64_t v, const ElfSymbol& s) { return v < s.vaddr; });
  if (pos == symbols_.begin()) return nullptr;
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
