/* outfile.h - creating output files that never replace a file and never
 * write through a symbolic link.
 *
 * Output nodes (SaveImage, SaveLatent) pick a name ("<prefix>_<counter>_.png")
 * from what the folder holds, but another process may pick the same name at
 * the same moment. So a file is written under a temporary name in the same
 * folder, fsync'd, and only then published under its final name with an
 * operation that fails when the name exists (renameat2 RENAME_NOREPLACE, or
 * link() where the file system lacks it). The caller retries with the next
 * name; nothing anybody else wrote is ever replaced.
 *
 * Links: the root folder is taken as the user gave it (it may be a link);
 * every subfolder below it is opened with O_NOFOLLOW and a subfolder that is a
 * symbolic link is refused. Files are created with O_EXCL relative to the
 * folder's descriptor, and publishing never follows a link at the final name
 * (it just counts as taken), so nothing is written outside the folder.
 *
 * Temporaries are named ".sdflow-tmp-<pid>-<start>-<random>-<host>", where
 * <start> is the process start time (from /proc, 0 where unknown) so that a
 * reused pid is not mistaken for the writer. sd_outdir_scan removes the
 * temporaries of this host (by host name) whose process is gone (a run
 * killed with -9); those of other hosts sharing the folder are left alone.
 */
#ifndef SD_OUTFILE_H
#define SD_OUTFILE_H

#include <stdint.h>
#include <stdio.h>
#include "error.h"

/* An open output folder. */
typedef struct sd_outdir {
    int fd;     /* O_DIRECTORY descriptor, -1 when closed */
    char *path; /* absolute path: realpath(root) + "/" + subfolder */
} sd_outdir;

/* Open root/subfolder for writing, creating missing folders. `subfolder` is
 * relative, normalized (no "." or ".." parts; "" for the root itself).
 * SD_ERR_INVALID when a subfolder component is a symbolic link or not a
 * folder; SD_ERR_IO when a folder cannot be created or opened. */
sd_status sd_outdir_open(const char *root, const char *subfolder, sd_outdir *d, sd_error *err);
void sd_outdir_close(sd_outdir *d);
/* Open an existing folder as it is named (links followed, nothing created),
 * for files that replace a fixed path (sd_outfile_replace). SD_ERR_IO when it
 * cannot be opened. */
sd_status sd_outdir_open_existing(const char *path, sd_outdir *d, sd_error *err);

/* Calls fn(user, name) for every entry of the folder except "." and "..",
 * after removing stale temporaries (see above; those are not visited).
 * *removed (may be NULL) receives how many were removed. */
sd_status sd_outdir_scan(sd_outdir *d, void (*fn)(void *user, const char *name), void *user,
                         int *removed, sd_error *err);

/* Whether `name` is one of our temporaries, and whether its writer (on this
 * host) is gone. */
int sd_outfile_is_temp(const char *name);
int sd_outfile_temp_is_stale(const char *name);

/* A file being written. */
typedef struct sd_outfile {
    int dirfd;     /* borrowed from the sd_outdir */
    FILE *f;       /* write the contents here ("wb"); NULL after publishing */
    char tmp[256]; /* temporary name in the folder; "" once published */
    int synced;    /* flushed, fsync'd and hashed */
    uint8_t sha256[32];
} sd_outfile;

/* Create a new temporary file (mode 0644 before umask) in the folder. */
sd_status sd_outfile_create(const sd_outdir *d, sd_outfile *of, sd_error *err);

/* Flush and fsync the contents (once), hash them into of->sha256, then
 * publish the file under `name`, which must not contain '/'. When `name`
 * exists (a file, a folder or a link, even a dangling one) nothing is
 * changed, *taken is set to 1 and SD_OK returned: call again with another
 * name. On success *taken is 0, the temporary name is gone, the folder is
 * fsync'd and of->f closed. On error the temporary stays for
 * sd_outfile_discard. */
sd_status sd_outfile_publish(sd_outfile *of, const char *name, int *taken, sd_error *err);

/* Flush, fsync and hash as above, then rename the file onto `name`,
 * replacing what is there (a link at `name` is replaced, not followed). For
 * a path the user names to be rewritten (a preview), not for output nodes. */
sd_status sd_outfile_replace(sd_outfile *of, const char *name, sd_error *err);

/* The whole file at once: `n` bytes written to a new temporary in the
 * folder and renamed onto `name` as sd_outfile_replace does (for uploads
 * and copies of known bytes, not for output nodes' exclusive names). */
sd_status sd_outfile_write_replace(const sd_outdir *d, const char *name, const void *data, size_t n, sd_error *err);

/* Close and remove the temporary file if it is still there. Safe to call
 * after a successful publish (then it does nothing) or on a zeroed struct. */
void sd_outfile_discard(sd_outfile *of);

#endif
