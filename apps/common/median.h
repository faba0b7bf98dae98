/* The median of a few doubles, as the commands take it of repeated timings and of errors.
 * Nothing else: no weighting, no quantiles beyond what calibrate_comm.h adds. */
#ifndef FB_MEDIAN_H
#define FB_MEDIAN_H

/* Sorts v[0..n) ascending and returns its median (the mean of the middle two when n is even);
 * NAN when n is 0. */
double fb_median(double *v, int n);

/* The qsort comparison of doubles, ascending. */
int fb_cmp_double(const void *a, const void *b);

#endif
