// Whether a store into a page of a mapped file can make the file system look for new space. Where it
// can (copy-on-write and log-structured file systems, and any we cannot see through), a full disk turns a
// plain store into SIGBUS in the storing thread, `add`, and a nearly full btrfs can hold that thread in the
// kernel for minutes.

#include "CTelemetrySignals.h"

#if defined(__linux__)
#include <sys/vfs.h>

// Super-block magic numbers (statfs(2), linux/magic.h).
#define TB_EXT_MAGIC 0xEF53u
#define TB_XFS_MAGIC 0x58465342u
#define TB_TMPFS_MAGIC 0x01021994u

int tb_file_overwrites_in_place(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0) return 0;
    // An allowlist: ext2/3/4 and XFS overwrite allocated blocks in place, tmpfs allocates its pages at
    // fallocate. Everything else may not: btrfs (seen here stuck in btrfs_page_mkwrite for 120 s on a
    // nearly full disk, even for a NOCOW file, and SIGBUS once full), ZFS, bcachefs, F2FS and NILFS2 write
    // out of place, and overlayfs (Docker's default) or FUSE report their own type over whatever is below.
    switch ((unsigned int)fs.f_type) {
    case TB_EXT_MAGIC:
    case TB_XFS_MAGIC:
    case TB_TMPFS_MAGIC:
        return 1;
    default:
        return 0;
    }
}

#else

int tb_file_overwrites_in_place(int fd) { (void)fd; return 0; }

#endif
