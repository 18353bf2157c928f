// /proc/net/dev (per interface) and /proc/net/{snmp,netstat} (IP/TCP/UDP protocol counters, as nstat shows).
#include <algorithm>
#include <array>

#include "sample/sampler_family.h"

namespace stackscope::procfs {

namespace {

bool is_error_like(std::string_view name) {
  for (std::string_view w : {"err", "Err", "drop", "Drop", "Retrans", "Overflow", "Fail", "Timeout", "Reset",
                             "Discard", "Prune", "Lost", "Loss", "fifo", "frame", "colls", "carrier", "NoPorts",
                             "Rsts", "Pressure", "Spurious"})
    if (name.find(w) != std::string_view::npos) return true;
  return false;
}

class NetDevFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "netdev"; }
  std::string open() override { return file_.open(ctx_.proc("net/dev")) ? "" : file_.error(); }

  void sample(std::vector<Sample>& out) override {
    int64_t t = monotonic_ns();
    auto text = read(file_);
    if (!text) return;
    report("net/dev", parse_net_dev(*text, rows_));
    size_t slot = 0;
    for (const NetDevRow& row : rows_) {
      bool skip = std::any_of(ctx_.options.skip_interfaces.begin(), ctx_.options.skip_interfaces.end(),
                              [&](const std::string& p) { return row.iface.substr(0, p.size()) == p; });
      for (size_t i = 0; i < kNetDevFields.size(); ++i, ++slot) {
        if (skip || !(row.present & (1u << i))) continue;
        auto id = ids_.get(ctx_, slot, row.iface, 0, [&] {
          if (i == 0) declare_link_speed(row.iface, t, out);
          std::string_view f = kNetDevFields[i];
          bool bytes = f.substr(3) == "bytes";
          return std::optional(series_info("net." + std::string(f), std::string(row.iface), Subsystem::network,
                                           bytes ? "bytes" : "count", SeriesKind::counter,
                                           is_error_like(f) ? SeriesCategory::event_counter : SeriesCategory::dynamic));
        });
        if (id) out.push_back({*id, t, static_cast<double>(row.values[i])});
      }
    }
  }

 private:
  // Link speed (static) lets derived_series compute utilisation; virtual NICs say -1 and get none.
  void declare_link_speed(std::string_view iface, int64_t t, std::vector<Sample>& out) {
    auto text = read_small_file(ctx_.sys("class/net/" + std::string(iface) + "/speed"), 64);
    auto mbps = text ? parse_sysfs_int(*text) : std::nullopt;
    if (!mbps || *mbps <= 0) return;
    SeriesId id = ctx_.declare(series_info("net.link.speed", std::string(iface), Subsystem::network, "bits/s",
                                           SeriesKind::static_value, SeriesCategory::static_value, "sysfs"));
    out.push_back({id, t, static_cast<double>(*mbps) * 1e6});
  }

  ProcFile file_;
  std::vector<NetDevRow> rows_;
  SlotIds ids_;
};

// nstat's view (Reveal Appendix A): retransmissions, drops, listen overflows, resets, errors.
constexpr std::string_view kProtoDefault[] = {
    "Ip.InReceives", "Ip.InDiscards", "Ip.InDelivers", "Ip.OutRequests", "Ip.OutDiscards", "Ip.OutNoRoutes",
    "Ip.InHdrErrors", "Ip.InAddrErrors", "Ip.ReasmFails", "Tcp.ActiveOpens", "Tcp.PassiveOpens",
    "Tcp.AttemptFails", "Tcp.EstabResets", "Tcp.CurrEstab", "Tcp.InSegs", "Tcp.OutSegs", "Tcp.RetransSegs",
    "Tcp.InErrs", "Tcp.OutRsts", "Tcp.InCsumErrors", "Udp.InDatagrams", "Udp.NoPorts", "Udp.InErrors",
    "Udp.OutDatagrams", "Udp.RcvbufErrors", "Udp.SndbufErrors", "Udp.InCsumErrors", "TcpExt.ListenOverflows",
    "TcpExt.ListenDrops", "TcpExt.TCPLostRetransmit", "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans",
    "TcpExt.TCPTimeouts", "TcpExt.TCPLossProbes", "TcpExt.TCPBacklogDrop", "TcpExt.TCPRcvQDrop",
    "TcpExt.TCPZeroWindowDrop", "TcpExt.TCPOFODrop", "TcpExt.TCPOFOQueue", "TcpExt.TCPAbortOnTimeout",
    "TcpExt.TCPAbortOnData", "TcpExt.TCPSynRetrans", "TcpExt.TCPRetransFail", "TcpExt.TCPMemoryPressures",
    "TcpExt.PruneCalled", "TcpExt.RcvPruned", "TcpExt.TCPSpuriousRTOs", "TcpExt.TCPReqQFullDrop",
    "TcpExt.TCPDSACKRecv", "TcpExt.DelayedACKs", "IpExt.InOctets", "IpExt.OutOctets", "IpExt.InCEPkts"};

class NetProtoFamily final : public Family {
 public:
  using Family::Family;
  std::string_view name() const override { return "netproto"; }
  // snmp + netstat cost ~35 us a read; they hold error/event counters only.
  int min_period_ms() const override { return 250; }
  std::string open() override {
    bool a = files_[0].open(ctx_.proc("net/snmp"), true), b = files_[1].open(ctx_.proc("net/netstat"), true);
    return a || b ? "" : files_[0].error();
  }

  void sample(std::vector<Sample>& out) override {
    for (size_t f = 0; f < 2; ++f) {
      if (!files_[f].is_open()) continue;
      int64_t t = monotonic_ns();
      auto text = read(files_[f]);
      if (!text) continue;
      report(f == 0 ? "net/snmp" : "net/netstat", parse_net_snmp(*text, values_));
      for (size_t i = 0; i < values_.size(); ++i) {
        const ProtoValue& v = values_[i];
        int64_t sub = static_cast<int64_t>(v.group.size()) << 16 | (v.group.empty() ? 0 : v.group[0]);
        auto id = ids_[f].get(ctx_, i, v.name, sub, [&]() -> std::optional<SeriesInfo> {
          std::string key = std::string(v.group) + "." + std::string(v.name);
          if (!ctx_.options.net_protocol_all &&
              std::find(std::begin(kProtoDefault), std::end(kProtoDefault), key) == std::end(kProtoDefault))
            return std::nullopt;
          bool fixed = key == "Tcp.RtoAlgorithm" || key == "Tcp.RtoMin" || key == "Tcp.RtoMax" ||
                       key == "Tcp.MaxConn" || key == "Ip.Forwarding" || key == "Ip.DefaultTTL";
          bool gauge = key == "Tcp.CurrEstab" || key == "MPTcpExt.MPCurrEstab";
          bool octets = v.name.find("Octets") != std::string_view::npos;
          return series_info("net." + sanitize_name(key), "", Subsystem::network, octets ? "bytes" : "count",
                             fixed ? SeriesKind::static_value : gauge ? SeriesKind::gauge : SeriesKind::counter,
                             fixed            ? SeriesCategory::static_value
                             : is_error_like(v.name) ? SeriesCategory::event_counter
                                                     : SeriesCategory::dynamic);
        });
        if (id) out.push_back({*id, t, static_cast<double>(v.value)});
      }
    }
  }

 private:
  std::array<ProcFile, 2> files_;
  std::array<SlotIds, 2> ids_;
  std::vector<ProtoValue> values_;
};

}  // namespace

std::unique_ptr<Family> make_netdev_family(SamplerContext& c) { return std::make_unique<NetDevFamily>(c); }
std::unique_ptr<Family> make_netproto_family(SamplerContext& c) { return std::make_unique<NetProtoFamily>(c); }

}  // namespace stackscope::procfs
