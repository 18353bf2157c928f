/* A stand-in libnvidia-ml.so.1 for the NVML sampler's tests: two GPUs with fixed readings. GPU 1 refuses
 * power, ECC and NVLink (NVML_ERROR_NOT_SUPPORTED); nvmlDeviceGetTotalEnergyConsumption is not exported at
 * all; the clock reasons come only under their pre-535 name. GPU 1 has the PCIe byte counters (fields 197/198),
 * GPU 0 only the 20 ms throughput query. fake_nvml_calls() tells a test how often an
 * entry point was called per GPU, so it can check that refused queries are not asked again ("init" and
 * "event_set": how many samplers started, counted under GPU 0). GPU 0 runs two processes, GPU 1 none
 * (fake_nvml_set_gpu0_processes(0): none on either). */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef union { double dVal; int siVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
                long long sllVal; unsigned short usVal; } nvmlValue_t;
typedef struct { unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType;
                 nvmlReturn_t nvmlReturn; nvmlValue_t value; } nvmlFieldValue_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; }
    nvmlProcessUtilizationSample_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; }
    nvmlProcessInfo_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned int gpuInstanceId,
                 computeInstanceId; } nvmlEventData_t;

enum { OK = 0, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, TIMEOUT = 10 };
enum { F_POWER, F_ECC, F_FIELDS, F_UTIL, F_PROC_UTIL, F_WAIT, F_PCIE, F_INIT, F_EVENT_SET, F_PROC_MEM, F_COUNT };
static const char* const kNames[F_COUNT] = {"power", "ecc", "fields", "util", "proc_util", "wait", "pcie", "init",
                                            "event_set", "proc_mem"};
static int calls[F_COUNT][2];

static int idx(nvmlDevice_t d) { return (int)((uintptr_t)d - 0x1000); }
static void count(int f, nvmlDevice_t d) { __atomic_add_fetch(&calls[f][idx(d) & 1], 1, __ATOMIC_RELAXED); }

/* The two processes GPU 0 reports (4242 with memory, 4343 without); a test sets real pids to check names. */
static unsigned int proc_pid[2] = {4242, 4343};
void fake_nvml_set_pids(unsigned int a, unsigned int b) {
  __atomic_store_n(&proc_pid[0], a, __ATOMIC_RELAXED);
  __atomic_store_n(&proc_pid[1], b, __ATOMIC_RELAXED);
}
/* A driver that disagrees with the header: 32-byte running-process entries (usedGpuCcProtectedMemory), and
   process-utilization samples written past the count it was given. */
static int misbehave;
void fake_nvml_set_misbehave(int on) { __atomic_store_n(&misbehave, on, __ATOMIC_RELAXED); }
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId;
                 unsigned long long usedGpuCcProtectedMemory; } nvmlProcessInfoLong_t;
static unsigned int pid_of(int i) { return __atomic_load_n(&proc_pid[i], __ATOMIC_RELAXED); }
/* 0: GPU 0 runs no process either (an empty running-process list; process utilization "not found"), as an idle GPU. */
static int gpu0_busy = 1;
void fake_nvml_set_gpu0_processes(int on) { __atomic_store_n(&gpu0_busy, on, __ATOMIC_RELAXED); }
static int busy(nvmlDevice_t d) { return !idx(d) && __atomic_load_n(&gpu0_busy, __ATOMIC_RELAXED); }

int fake_nvml_calls(const char* name, int device) {
  for (int f = 0; f < F_COUNT; ++f)
    if (strcmp(kNames[f], name) == 0) return __atomic_load_n(&calls[f][device & 1], __ATOMIC_RELAXED);
  return -1;
}

nvmlReturn_t nvmlInit_v2(void) { __atomic_add_fetch(&calls[F_INIT][0], 1, __ATOMIC_RELAXED); return OK; }
nvmlReturn_t nvmlShutdown(void) { return OK; }
const char* nvmlErrorString(nvmlReturn_t r) { return r == NOT_SUPPORTED ? "Not Supported" : "Fake Error"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) { *n = 2; return OK; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (i > 1) return 2;
  *d = (nvmlDevice_t)(uintptr_t)(0x1000 + i);
  return OK;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int len) {
  strncpy(name, idx(d) ? "Fake GPU B" : "Fake GPU A", len);
  return OK;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  count(F_UTIL, d);
  u->gpu = idx(d) ? 10 : 42;
  u->memory = idx(d) ? 5 : 17;
  return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  (void)d;
  m->total = 80ull << 30;
  m->used = 20ull << 30;
  m->free = m->total - m->used;
  return OK;
}
/* v2 leaves the driver's reservation (1 GiB here) out of used, as nvidia-smi does; gpu1 answers v1 only. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  if (idx(d)) return 3; /* NVML_ERROR_NOT_SUPPORTED */
  if (m->version != (unsigned)(sizeof(nvmlMemory_v2_t) | (2u << 24))) return 25; /* ARGUMENT_VERSION_MISMATCH */
  m->total = 80ull << 30;
  m->reserved = 1ull << 30;
  m->used = 19ull << 30;
  m->free = m->total - m->used - m->reserved;
  return OK;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) {
  count(F_POWER, d);
  if (idx(d)) return NOT_SUPPORTED;
  *mw = 123456;
  return OK;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int* t) {
  (void)d;
  if (sensor != 0) return 2;
  *t = 55;
  return OK;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int* mhz) {
  (void)d;
  *mhz = type == 1 ? 1980 : type == 2 ? 2619 : 0;
  return OK;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int* kbs) {
  count(F_PCIE, d);
  *kbs = counter == 0 ? 1000 : 2000;
  return OK;
}
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t* v) {
  count(F_FIELDS, d);
  for (int i = 0; i < n; ++i) {
    v[i].valueType = 3;
    if (v[i].fieldId == 94) {
      v[i].nvmlReturn = OK;
      v[i].value.ullVal = 3;
    } else if (v[i].fieldId == 197 || v[i].fieldId == 198) {
      /* PCIe byte counters on GPU 1 only: 5 GB/s out, 2 GB/s in, as bytes since an epoch (the clock). */
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
      v[i].nvmlReturn = idx(d) ? OK : NOT_SUPPORTED;
      v[i].value.ullVal = ns * (v[i].fieldId == 197 ? 5 : 2);
    } else if (v[i].fieldId == 138 || v[i].fieldId == 139) {
      v[i].nvmlReturn = idx(d) ? OK : NOT_SUPPORTED;
      v[i].value.ullVal = v[i].fieldId == 138 ? 100 : 200;
    } else {
      v[i].nvmlReturn = NOT_SUPPORTED;
    }
  }
  if (__atomic_load_n(&misbehave, __ATOMIC_RELAXED))  /* one entry past the end, as a per-link expansion would */
    memset(&v[n], 0x11, sizeof v[n]);
  return OK;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long* r) {
  (void)d;
  *r = 0x4 | 0x20;  /* SW power cap + SW thermal slowdown */
  return OK;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long* c) {
  count(F_ECC, d);
  if (idx(d) || counter != 0) return NOT_SUPPORTED;
  *c = type == 0 ? 5 : 0;
  return OK;
}
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t* s, unsigned int* n,
                                             unsigned long long last) {
  count(F_PROC_UTIL, d);
  if (!busy(d)) return NOT_FOUND;
  if (!s || *n < 2) { *n = 2; return INSUFFICIENT_SIZE; }
  if (__atomic_load_n(&misbehave, __ATOMIC_RELAXED)) {  /* four past the end */
    for (unsigned int i = *n; i < *n + 4; ++i) s[i] = (nvmlProcessUtilizationSample_t){pid_of(0), last + 1, 99, 99, 0, 0};
  }
  *n = 2;  /* two samples of one process: the newer one counts */
  s[0] = (nvmlProcessUtilizationSample_t){pid_of(0), last + 500, 30, 20, 0, 0};
  s[1] = (nvmlProcessUtilizationSample_t){pid_of(0), last + 1000, 50, 25, 0, 0};
  return OK;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int* n, nvmlProcessInfo_t* p) {
  count(F_PROC_MEM, d);
  if (!busy(d)) { *n = 0; return OK; }
  if (*n < 2) { *n = 2; return INSUFFICIENT_SIZE; }
  *n = 2;
  if (__atomic_load_n(&misbehave, __ATOMIC_RELAXED)) {
    nvmlProcessInfoLong_t* q = (nvmlProcessInfoLong_t*)p;
    q[0] = (nvmlProcessInfoLong_t){pid_of(0), 1ull << 30, 0xFFFFFFFFu, 0xFFFFFFFFu, 0};
    q[1] = (nvmlProcessInfoLong_t){pid_of(1), ~0ull, 0xFFFFFFFFu, 0xFFFFFFFFu, 0};
    return OK;
  }
  p[0] = (nvmlProcessInfo_t){pid_of(0), 1ull << 30, 0xFFFFFFFFu, 0xFFFFFFFFu};
  p[1] = (nvmlProcessInfo_t){pid_of(1), ~0ull, 0xFFFFFFFFu, 0xFFFFFFFFu};  /* NVML_VALUE_NOT_AVAILABLE */
  return OK;
}
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  __atomic_add_fetch(&calls[F_EVENT_SET][0], 1, __ATOMIC_RELAXED);
  *set = (nvmlEventSet_t)(uintptr_t)0x5e7; return OK; }
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t set) {
  (void)set;
  if (idx(d)) return NOT_SUPPORTED;
  return types == 0x8 ? OK : 2;
}
/* How nvmlEventSetWait_v2 answers: 0 one XID 79 (the first such wait in the process), then a timeout after the full
   wait, as the driver does; 1 at once, success with a non-XID event type; 2 at once, NVML_ERROR_TIMEOUT; 3 at
   once, an error (NVML_ERROR_UNKNOWN). 1-3 are what a thread that loops on the answer would spin on. */
static int wait_mode;
void fake_nvml_set_wait_mode(int mode) { __atomic_store_n(&wait_mode, mode, __ATOMIC_RELAXED); }
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* e, unsigned int timeout_ms) {
  (void)set;
  static int xid_given;
  __atomic_add_fetch(&calls[F_WAIT][0], 1, __ATOMIC_RELAXED);
  switch (__atomic_load_n(&wait_mode, __ATOMIC_RELAXED)) {
    case 1:
      e->device = (nvmlDevice_t)(uintptr_t)0x1000;
      e->eventType = 0x1; /* nvmlEventTypeSingleBitEccError: not what was registered */
      e->eventData = 0;
      return OK;
    case 2: return TIMEOUT;
    case 3: return 999;
    default: break;
  }
  if (!__atomic_exchange_n(&xid_given, 1, __ATOMIC_RELAXED)) {  /* one XID 79, then quiet */
    e->device = (nvmlDevice_t)(uintptr_t)0x1000;
    e->eventType = 0x8;
    e->eventData = 79;
    return OK;
  }
  usleep(timeout_ms * 1000);
  return TIMEOUT;
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return OK; }
