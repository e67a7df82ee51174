/*
 * log.h: the daemon's log, to stderr (journald adds time and unit).
 */
#pragma once

#include "macro.h"

enum { LOG_LEVEL_ERR = 3, LOG_LEVEL_WARN = 4, LOG_LEVEL_INFO = 6, LOG_LEVEL_DEBUG = 7 };

void log_set_level(int level);
void log_msg(int level, const char *fmt, ...) _printf_(2, 3);

#define log_error(...) log_msg(LOG_LEVEL_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)
