/* ws.c - the /ws endpoint: ComfyUI's {"type", "data"} messages and binary
 * preview frames (internal.h). Framing, masking and ping/pong are
 * civetweb's.
 *
 * A client names itself with ?clientId= (else it gets a fresh id, which the
 * first status message reports as "sid"); execution messages of a prompt go
 * to the clients whose id is the prompt's client_id. A client's first
 * message may be ComfyUI's {"type": "feature_flags", "data": {...}}: the
 * server answers with its own flags, and a client with
 * supports_preview_metadata gets previews as event 4 frames (with their
 * node), the others as event 1. Anything else a client sends is read and
 * ignored, but a client that sends more
 * than 64 KiB in one message or more than 200 messages in a second is
 * disconnected, so a flood cannot keep a worker thread busy.
 *
 * Sending: frames are queued per client and written by one sender thread,
 * so the prompt worker never waits for a socket. A client whose queue grows
 * past --ws-max-queued (8 MiB; it does not read) or whose write fails is dropped: nothing
 * more is queued for it, and civetweb closes the connection when its
 * timeouts expire. */
#define _GNU_SOURCE /* memmem */
#include <civetweb.h>
#include <stdlib.h>
#include <string.h>
#include "core/json_util.h"
#include "internal.h"

enum { WS_MAX_MESSAGE = 64 * 1024, WS_MAX_PER_SECOND = 200 };

static void free_frames(srv_ws *w) {
    while (w->head) {
        srv_ws_frame *f = w->head;
        w->head = f->next;
        free(f);
    }
    w->tail = NULL;
    w->queued = 0;
}

/* Queues a copy of the frame for w. Caller holds ws_mu. Returns 0 when the
 * client was dropped now (its queue is over the limit). */
static int enqueue_locked(srv *s, srv_ws *w, int opcode, const char *buf, size_t n) {
    if (w->dropped) return 1;
    if (w->queued + n > s->max_ws_queued) {
        w->dropped = 1;
        free_frames(w);
        return 0;
    }
    srv_ws_frame *f = malloc(sizeof *f + n);
    if (!f) return 1; /* this frame is lost; the client stays */
    f->next = NULL;
    f->opcode = opcode;
    f->n = n;
    memcpy(f->data, buf, n);
    if (w->tail) w->tail->next = f;
    else w->head = f;
    w->tail = f;
    w->queued += n;
    pthread_cond_broadcast(&s->ws_cv);
    return 1;
}

static void *sender_main(void *arg) {
    srv *s = arg;
    size_t next = 0; /* round robin, so one slow client does not starve the others' turn */
    pthread_mutex_lock(&s->ws_mu);
    while (!s->ws_quit) {
        srv_ws *w = NULL;
        for (size_t k = 0; k < s->n_ws && !w; k++) {
            srv_ws *c = s->ws[(next + k) % s->n_ws];
            if (c->head && !c->dropped) { w = c; next = (next + k + 1) % s->n_ws; }
        }
        if (!w) {
            pthread_cond_wait(&s->ws_cv, &s->ws_mu);
            continue;
        }
        srv_ws_frame *f = w->head;
        w->head = f->next;
        if (!w->head) w->tail = NULL;
        w->queued -= f->n;
        w->writing = 1;
        pthread_mutex_unlock(&s->ws_mu);
        int rc = mg_websocket_write(w->conn, f->opcode, f->data, f->n);
        free(f);
        pthread_mutex_lock(&s->ws_mu);
        w->writing = 0;
        if (rc <= 0 && !w->dropped) {
            w->dropped = 1;
            free_frames(w);
            pthread_mutex_unlock(&s->ws_mu);
            srv_log(s, "ws: client %s dropped (a write failed)", w->sid);
            pthread_mutex_lock(&s->ws_mu);
        }
        pthread_cond_broadcast(&s->ws_cv); /* a close handler may wait for this write */
    }
    pthread_mutex_unlock(&s->ws_mu);
    return NULL;
}

static int ws_connect(const struct mg_connection *cc, void *cbdata) {
    srv *s = cbdata;
    struct mg_connection *c = (struct mg_connection *)cc;
    if (s->o->token) {
        /* same rule as HTTP requests: header or ?token= (browsers cannot set
         * headers on a WebSocket) */
        if (!srv_authorized(s, c)) return 1; /* non-zero: refused */
    }
    srv_ws *w = calloc(1, sizeof *w);
    if (!w) return 1;
    char *id = srv_query(c, "clientId");
    if (id && *id && strlen(id) < sizeof w->sid) {
        snprintf(w->sid, sizeof w->sid, "%s", id);
    } else {
        char u[37];
        srv_uuid4(u);
        size_t k = 0; /* ComfyUI's generated ids are uuid4().hex */
        for (const char *p = u; *p; p++) if (*p != '-') w->sid[k++] = *p;
        w->sid[k] = 0;
    }
    free(id);
    w->conn = c;
    pthread_mutex_lock(&s->ws_mu);
    int full = s->n_ws >= s->max_ws;
    srv_ws **list = full ? NULL : realloc(s->ws, (s->n_ws + 1) * sizeof *s->ws);
    if (list) {
        s->ws = list;
        s->ws[s->n_ws++] = w;
        mg_set_user_connection_data(c, w);
    }
    pthread_mutex_unlock(&s->ws_mu);
    if (!list) {
        srv_log(s, "ws: refused a connection (%s)", full ? "too many clients" : "out of memory");
        free(w);
        return 1;
    }
    return 0;
}

static void ws_ready(struct mg_connection *c, void *cbdata) {
    srv *s = cbdata;
    srv_ws *w = mg_get_user_connection_data(c);
    if (!w) return;
    cJSON *data = cJSON_CreateObject();
    cJSON_AddItemToObject(data, "status", srv_queue_info(s));
    cJSON_AddStringToObject(data, "sid", w->sid);
    cJSON *msg = cJSON_CreateObject();
    cJSON_AddStringToObject(msg, "type", "status");
    cJSON_AddItemToObject(msg, "data", data);
    char *text = sd_json_print(msg, 0);
    cJSON_Delete(msg);
    if (!text) return;
    pthread_mutex_lock(&s->ws_mu);
    enqueue_locked(s, w, MG_WEBSOCKET_OPCODE_TEXT, text, strlen(text));
    pthread_mutex_unlock(&s->ws_mu);
    free(text);
}

cJSON *srv_server_features(const srv *s) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddBoolToObject(f, "supports_preview_metadata", 1);
    cJSON_AddNumberToObject(f, "max_upload_size", (double)s->max_upload);
    return f;
}

/* The first message, when it is {"type": "feature_flags", "data": {...}}. */
static void read_feature_flags(srv *s, srv_ws *w, const char *data, size_t len) {
    cJSON *m = cJSON_ParseWithLength(data, len);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "feature_flags")) {
        const cJSON *flags = cJSON_GetObjectItemCaseSensitive(m, "data");
        int meta = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(flags, "supports_preview_metadata"));
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "type", "feature_flags");
        cJSON_AddItemToObject(msg, "data", srv_server_features(s));
        char *text = sd_json_print(msg, 0);
        cJSON_Delete(msg);
        pthread_mutex_lock(&s->ws_mu);
        w->preview_metadata = meta;
        if (text) enqueue_locked(s, w, MG_WEBSOCKET_OPCODE_TEXT, text, strlen(text));
        pthread_mutex_unlock(&s->ws_mu);
        free(text);
    }
    cJSON_Delete(m);
}

static int ws_data(struct mg_connection *c, int bits, char *data, size_t len, void *cbdata) {
    srv *s = cbdata;
    srv_ws *w = mg_get_user_connection_data(c);
    int opcode = bits & 0x0f;
    if (opcode == MG_WEBSOCKET_OPCODE_CONNECTION_CLOSE) return 0;
    if (opcode == MG_WEBSOCKET_OPCODE_PING || opcode == MG_WEBSOCKET_OPCODE_PONG) return 1;
    if (!w) return 0;
    double now = srv_now();
    if (now - w->window_start >= 1.0) {
        w->window_start = now;
        w->window_msgs = 0;
    }
    if (len > WS_MAX_MESSAGE || ++w->window_msgs > WS_MAX_PER_SECOND) {
        srv_log(s, "ws: client %s disconnected (%s)", w->sid, len > WS_MAX_MESSAGE ? "message too large" : "flood");
        /* (civetweb serializes writes to one connection) */
        mg_websocket_write(c, MG_WEBSOCKET_OPCODE_CONNECTION_CLOSE, "\x03\xf0", 2); /* 1008 policy violation */
        return 0;
    }
    if (opcode == MG_WEBSOCKET_OPCODE_TEXT && !w->seen_first) read_feature_flags(s, w, data, len);
    w->seen_first = 1;
    return 1;
}

static void ws_close(const struct mg_connection *cc, void *cbdata) {
    srv *s = cbdata;
    struct mg_connection *c = (struct mg_connection *)cc;
    srv_ws *w = mg_get_user_connection_data(c);
    if (!w) return;
    pthread_mutex_lock(&s->ws_mu);
    while (w->writing) pthread_cond_wait(&s->ws_cv, &s->ws_mu); /* the connection goes after this returns */
    for (size_t i = 0; i < s->n_ws; i++) {
        if (s->ws[i] != w) continue;
        s->ws[i] = s->ws[--s->n_ws];
        break;
    }
    free_frames(w);
    mg_set_user_connection_data(c, NULL);
    pthread_mutex_unlock(&s->ws_mu);
    free(w);
}

void srv_ws_register(srv *s) {
    s->ws_quit = 0;
    s->ws_sender_started = pthread_create(&s->ws_sender, NULL, sender_main, s) == 0;
    if (!s->ws_sender_started) srv_log(s, "error: cannot start the WebSocket sender: no WebSocket messages");
    mg_set_websocket_handler(s->mg, "/ws", ws_connect, ws_ready, ws_data, ws_close, s);
    mg_set_websocket_handler(s->mg, "/api/ws", ws_connect, ws_ready, ws_data, ws_close, s);
}

void srv_ws_stop(srv *s) {
    if (!s->ws_sender_started) return;
    pthread_mutex_lock(&s->ws_mu);
    s->ws_quit = 1;
    pthread_cond_broadcast(&s->ws_cv);
    pthread_mutex_unlock(&s->ws_mu);
    pthread_join(s->ws_sender, NULL);
    s->ws_sender_started = 0;
}

/* An event 4 frame (PREVIEW_IMAGE_WITH_METADATA) as the older event 1
 * (PREVIEW_IMAGE: image type 1 JPEG / 2 PNG, then the image) for clients
 * that did not ask for metadata; NULL when it is not such a frame. */
static char *preview_without_metadata(const char *buf, size_t n, size_t *out_n) {
    const unsigned char *b = (const unsigned char *)buf;
    if (n < 8 || b[0] || b[1] || b[2] || b[3] != 4) return NULL;
    size_t ml = (size_t)b[4] << 24 | (size_t)b[5] << 16 | (size_t)b[6] << 8 | b[7];
    if (ml > n - 8) return NULL;
    size_t img = n - 8 - ml;
    char *o = malloc(img + 8);
    if (!o) return NULL;
    int jpeg = memmem(buf + 8, ml, "image/jpeg", 10) != NULL;
    const unsigned char head[8] = {0, 0, 0, 1, 0, 0, 0, (unsigned char)(jpeg ? 1 : 2)};
    memcpy(o, head, 8);
    memcpy(o + 8, buf + 8 + ml, img);
    *out_n = img + 8;
    return o;
}

static void send_raw(srv *s, const char *sid, int opcode, const char *buf, size_t n) {
    char dropped[8][64];
    int n_dropped = 0;
    size_t old_n = 0;
    char *old = opcode == MG_WEBSOCKET_OPCODE_BINARY ? preview_without_metadata(buf, n, &old_n) : NULL;
    pthread_mutex_lock(&s->ws_mu);
    for (size_t i = 0; i < s->n_ws; i++) {
        srv_ws *w = s->ws[i];
        if (sid && strcmp(w->sid, sid)) continue;
        int as_old = old && !w->preview_metadata;
        if (!enqueue_locked(s, w, opcode, as_old ? old : buf, as_old ? old_n : n) && n_dropped < 8)
            snprintf(dropped[n_dropped++], sizeof dropped[0], "%s", w->sid);
    }
    pthread_mutex_unlock(&s->ws_mu);
    free(old);
    for (int k = 0; k < n_dropped; k++)
        srv_log(s, "ws: client %s dropped (over %zu bytes of messages waiting: it does not read)", dropped[k],
                s->max_ws_queued);
}

void srv_ws_send(srv *s, const char *sid, const char *event, cJSON *data) {
    cJSON *msg = cJSON_CreateObject();
    if (!msg) { cJSON_Delete(data); return; }
    cJSON_AddStringToObject(msg, "type", event);
    cJSON_AddItemToObject(msg, "data", data ? data : cJSON_CreateObject());
    char *text = sd_json_print(msg, 0);
    cJSON_Delete(msg);
    if (!text) return;
    send_raw(s, sid, MG_WEBSOCKET_OPCODE_TEXT, text, strlen(text));
    free(text);
}

void srv_ws_send_binary(srv *s, const char *sid, uint32_t event, const void *payload, size_t n) {
    size_t len = 0;
    char *buf = srv_binary_frame(event, payload, n, &len);
    if (buf) srv_ws_send_frame(s, sid, buf, len);
    free(buf);
}

void srv_ws_send_frame(srv *s, const char *sid, const void *frame, size_t n) {
    send_raw(s, sid, MG_WEBSOCKET_OPCODE_BINARY, frame, n);
}

void srv_ws_broadcast_status(srv *s) {
    cJSON *data = cJSON_CreateObject();
    cJSON_AddItemToObject(data, "status", srv_queue_info(s));
    srv_ws_send(s, NULL, "status", data);
}
