/* A C99 application embedding Backplane through backplane.h alone, built against an
 * installed tree: plugins come from the install directory next to libbackplane.so.
 * Arguments, if any, are further plugin files to load; their refusals are printed. */
#include <stdio.h>
#include <string.h>

#include <backplane/backplane.h>

enum { RANKS = 4, COUNT = 1000 };

static int report(const char *what, bp_error *error) {
  fprintf(stderr, "c_consumer: %s failed: %s\n%s\n", what, bp_error_message(error), bp_error_json(error));
  bp_error_destroy(error);
  return 1;
}

/* Rank r holds r + 1 + i/2 at element i; the sum over four ranks is 10 + 2i, exact in f32. */
static float input(int rank, int i) { return (float)(rank + 1) + (float)i * 0.5f; }

int main(int argc, char **argv) {
  bp_host *host = NULL;
  bp_device *devices[RANKS];
  bp_buffer *buffers[RANKS] = {NULL, NULL, NULL, NULL};
  bp_group *group = NULL;
  bp_error *error = NULL;
  static float data[RANKS][COUNT];
  int status = 1, rank, i, arg;
  size_t p, wrong = 0;

  /* NULL options: the default search, which for an installed tree is the
   * plugin directory next to the library. */
  if ((error = bp_host_create(NULL, &host)) != NULL) return report("bp_host_create", error);
  for (p = 0; p < bp_host_plugin_count(host); ++p) {
    bp_plugin_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if ((error = bp_host_plugin(host, p, &info)) != NULL) {
      report("bp_host_plugin", error);
      goto done;
    }
    printf("plugin %s %s file: %s\n", info.name, info.version, info.file);
  }
  for (p = 0; p < bp_host_refused_count(host); ++p)
    printf("refused: %s\n", bp_error_message(bp_host_refused(host, p)));
  for (arg = 1; arg < argc; ++arg) {
    if ((error = bp_host_load_plugin(host, argv[arg])) != NULL) {
      printf("load %s: %s: %s\n", argv[arg], bp_code_name(bp_error_code(error)), bp_error_message(error));
      bp_error_destroy(error);
    } else {
      printf("load %s: loaded\n", argv[arg]);
    }
  }

  for (rank = 0; rank < RANKS; ++rank) {
    char name[16];
    sprintf(name, "cpu:%d", rank);
    if ((error = bp_host_find_device(host, name, &devices[rank])) != NULL) {
      report(name, error);
      goto done;
    }
    for (i = 0; i < COUNT; ++i) data[rank][i] = input(rank, i);
    if ((error = bp_buffer_create(devices[rank], sizeof data[rank], &buffers[rank])) != NULL ||
        (error = bp_buffer_write(buffers[rank], 0, data[rank], sizeof data[rank])) != NULL) {
      report("bp_buffer_create/write", error);
      goto done;
    }
  }
  if ((error = bp_group_create(host, devices, RANKS, NULL, &group)) != NULL) {
    report("bp_group_create", error);
    goto done;
  }
  /* In place: send == recv. */
  if ((error = bp_all_reduce(group, buffers, buffers, COUNT, BP_F32, BP_SUM)) != NULL) {
    report("bp_all_reduce", error);
    goto done;
  }
  for (rank = 0; rank < RANKS; ++rank) {
    if ((error = bp_buffer_read(buffers[rank], 0, data[rank], sizeof data[rank])) != NULL) {
      report("bp_buffer_read", error);
      goto done;
    }
    for (i = 0; i < COUNT; ++i) {
      const float want = 10.0f + 2.0f * (float)i;
      if (data[rank][i] != want && wrong++ < 5)
        fprintf(stderr, "c_consumer: rank %d element %d: expected %g, got %g\n", rank, i, want, data[rank][i]);
    }
  }
  if (wrong == 0) {
    printf("all_reduce(f32, sum) of %d elements on cpu:0..cpu:%d: ok\n", COUNT, RANKS - 1);
    status = 0;
  } else {
    fprintf(stderr, "c_consumer: %zu wrong elements\n", wrong);
  }

done:
  for (rank = 0; rank < RANKS; ++rank)
    if (buffers[rank]) bp_buffer_destroy(buffers[rank]);
  if (group) bp_group_destroy(group);
  bp_host_destroy(host);
  return status;
}
