package detect

// ServerInfo is where a running SGLang server's current arguments are read,
// for steps that change one (the reference names both endpoints and no
// release where the name changed).
const ServerInfo = "/server_info (/get_server_info on older releases)"
