/* The `export` subcommand (export.c). */
#ifndef FB_EXPORT_H
#define FB_EXPORT_H

int fb_export_main(int argc, char **argv);

#endif
