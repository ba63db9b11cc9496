/* One node-step of spank_saker.so outside Slurm, as slurmstepd drives it: load the
 * plugin, slurm_spank_init and init_post_opt in the remote context, slurm_spank_task_init
 * in a forked child (the task, which exits at once as `true` would), task_exit and exit.
 * Why: bench_step_launch.sh measures the plugin's cost per node-step in a real cluster,
 * where it is one part in ~30 of the CPU time and shared with other people's load; this
 * harness is that part alone, in a process of its own, for `perf stat -r`, `strace -c -f`
 * and `valgrind --tool=callgrind` (bench/spank_step_profile.sh runs them).
 *
 *   spank_step_harness PLUGIN.so|none prolog|step ARGS...   (ARGS: plugstack.conf's)
 *
 * The process environment is slurmstepd's (SLURMD_NODENAME, SLURM_JOB_ID, ... for the
 * prolog); the job's environment (spank_getenv) is every HARNESS_JOB_NAME=VALUE given,
 * as NAME. HARNESS_DATASET=LIST is the step's --dataset, HARNESS_JOB_ID and
 * HARNESS_STEP_ID its ids (default step: the harness's pid, a new step per run as in a
 * job), HARNESS_SPOOL the slurmd spool (the topology cache), HARNESS_CONF slurm.conf's path
 * (gres.conf and cgroup.conf are looked for beside it).
 * The SPANK calls are defined here (-rdynamic exports them); hostlists come from libslurm
 * (plugins/spank/Makefile.inc builds it: make bench/spank_step_harness).
 * HARNESS_PRELOAD=LIB[:LIB...] loads libraries before the plugin, as the daemon that runs
 * it has them: Debian's slurmstepd links libhwloc, so bench/spank_step_profile.sh preloads
 * it and a library slurmstepd has loaded already is not counted as the plugin's. Without
 * it the harness links no more than libslurm, as srun and a bare machine: what
 * tests/integration/spank_lazy_libs.sh needs to see the plugin load libraries itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

slurm_conf_t slurm_conf; /* slurmstepd's parsed slurm.conf: the plugin reads two paths */
static spank_context_t g_context = S_CTX_REMOTE;
static struct spank_option* g_options[16];
static int g_n_options;
static uint32_t g_step_id; /* HARNESS_STEP_ID, or this process's id: a new step per run */

static void say(const char* level, const char* fmt, va_list ap) {
  if (getenv("HARNESS_QUIET")) return;
  fprintf(stderr, "harness %s: ", level);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}
#define LOG_FN(name, level) \
  void name(const char* fmt, ...) { va_list ap; va_start(ap, fmt); say(level, fmt, ap); va_end(ap); }
LOG_FN(slurm_error, "error")
LOG_FN(slurm_info, "info")
LOG_FN(slurm_verbose, "verbose")
LOG_FN(slurm_debug, "debug")

/* Where slurmstepd finds gres.conf and cgroup.conf: beside HARNESS_CONF. libslurm's own
 * would look in its built-in default directory (it does not read the harness's
 * slurm_conf); the plugin frees the path with slurm_xfree, so libslurm allocates it. */
char* slurm_xstrdup(const char* str);
char* slurm_get_extra_conf_path(const char* name) {
  const char* conf = getenv("HARNESS_CONF");
  if (conf == NULL || strrchr(conf, '/') == NULL) return NULL;
  char path[4096];
  snprintf(path, sizeof path, "%.*s/%s", (int)(strrchr(conf, '/') - conf), conf, name);
  return slurm_xstrdup(path);
}

static void unexpected(const char* what) {
  fprintf(stderr, "harness: the plugin called %s, which this harness does not provide\n", what);
  abort();
}

spank_context_t spank_context(void) { return g_context; }

spank_err_t spank_option_register(spank_t sp, struct spank_option* opt) {
  (void)sp;
  if (g_n_options == 16) return ESPANK_ERROR;
  g_options[g_n_options++] = opt;
  return ESPANK_SUCCESS;
}

static uint32_t env_u32(const char* name, uint32_t dflt) {
  const char* v = getenv(name);
  return v ? (uint32_t)strtoul(v, NULL, 10) : dflt;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...) {
  (void)sp;
  va_list ap;
  va_start(ap, item);
  void* out = va_arg(ap, void*);
  va_end(ap);
  switch (item) {
    case S_JOB_ID: *(uint32_t*)out = env_u32("HARNESS_JOB_ID", 1); break;
    case S_JOB_STEPID: *(uint32_t*)out = g_step_id; break;
    case S_JOB_ARRAY_ID: *(uint32_t*)out = env_u32("HARNESS_JOB_ID", 1); break;
    case S_JOB_ARRAY_TASK_ID: *(uint32_t*)out = NO_VAL; break;
    case S_JOB_UID: case S_JOB_GID: *(uint32_t*)out = 0; break;
    case S_JOB_NODEID: case S_TASK_ID: *(uint32_t*)out = 0; break;
    case S_JOB_LOCAL_TASK_COUNT: case S_JOB_NCPUS: *(uint32_t*)out = 1; break;
    default: return ESPANK_NOT_AVAIL;
  }
  return ESPANK_SUCCESS;
}

spank_err_t spank_getenv(spank_t sp, const char* var, char* buf, int len) {
  (void)sp;
  char name[256];
  snprintf(name, sizeof name, "HARNESS_JOB_%s", var);
  const char* v = getenv(name);
  if (v == NULL) return ESPANK_ENV_NOEXIST;
  if ((int)strlen(v) >= len) return ESPANK_NOSPACE;
  strcpy(buf, v);
  return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char* var, const char* val, int overwrite) {
  (void)sp;
  char name[256];
  snprintf(name, sizeof name, "HARNESS_JOB_%s", var);
  return setenv(name, val, overwrite) == 0 ? ESPANK_SUCCESS : ESPANK_ERROR;
}

spank_err_t spank_unsetenv(spank_t sp, const char* var) {
  (void)sp;
  char name[256];
  snprintf(name, sizeof name, "HARNESS_JOB_%s", var);
  return unsetenv(name) == 0 ? ESPANK_SUCCESS : ESPANK_ERROR;
}

spank_err_t spank_job_control_setenv(spank_t sp, const char* name, const char* value, int overwrite) {
  (void)sp; (void)name; (void)value; (void)overwrite;
  unexpected("spank_job_control_setenv");
  return ESPANK_ERROR;
}

typedef int (*hook_t)(spank_t, int, char**);

static int call(void* so, const char* name, int argc, char** argv) {
  hook_t f = (hook_t)dlsym(so, name);
  if (f == NULL) return 0; /* slurmstepd skips what a plugin does not define */
  const int rc = f(NULL, argc, argv);
  if (rc != 0) fprintf(stderr, "harness: %s returned %d\n", name, rc);
  return rc;
}

static int step(void* so, int argc, char** argv) {
  int rc = so ? call(so, "slurm_spank_init", argc, argv) : 0;
  const char* dataset = getenv("HARNESS_DATASET");
  for (int i = 0; i < g_n_options && dataset; ++i)
    if (strcmp(g_options[i]->name, "dataset") == 0) rc |= g_options[i]->cb(0, dataset, 1);
  if (so) rc |= call(so, "slurm_spank_init_post_opt", argc, argv);
  const pid_t pid = fork();
  if (pid == 0) _exit(so && call(so, "slurm_spank_task_init", argc, argv) != 0 ? 1 : 0);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc |= 1;
  if (so) rc |= call(so, "slurm_spank_task_exit", argc, argv) | call(so, "slurm_spank_exit", argc, argv);
  return rc;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[2], "prolog") != 0 && strcmp(argv[2], "step") != 0)) {
    fprintf(stderr, "usage: %s PLUGIN.so|none prolog|step [PLUGSTACK ARGS...]\n", argv[0]);
    return 2;
  }
  g_step_id = getenv("HARNESS_STEP_ID") ? (uint32_t)strtoul(getenv("HARNESS_STEP_ID"), NULL, 10) : (uint32_t)getpid();
  slurm_conf.slurmd_spooldir = getenv("HARNESS_SPOOL");
  slurm_conf.slurm_conf = getenv("HARNESS_CONF");
  const char* preload = getenv("HARNESS_PRELOAD");
  if (preload && *preload) {
    char* list = strdup(preload);
    for (char* lib = strtok(list, ":"); lib; lib = strtok(NULL, ":"))
      if (dlopen(lib, RTLD_NOW | RTLD_GLOBAL) == NULL) {
        fprintf(stderr, "harness: HARNESS_PRELOAD: %s\n", dlerror());
        return 2;
      }
    free(list);
  }
  void* so = NULL;
  if (strcmp(argv[1], "none") != 0 && (so = dlopen(argv[1], RTLD_LAZY)) == NULL) {
    fprintf(stderr, "harness: %s\n", dlerror());
    return 1;
  }
  int rc;
  if (strcmp(argv[2], "prolog") == 0) {
    g_context = S_CTX_JOB_SCRIPT;
    rc = call(so, "slurm_spank_job_prolog", argc - 3, argv + 3);
  } else {
    rc = step(so, argc - 3, argv + 3);
  }
  if (so) dlclose(so);
  return rc == 0 ? 0 : 1;
}
