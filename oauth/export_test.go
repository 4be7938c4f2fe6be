package oauth

// ForgetClients empties the in-memory client cache, so a test sees what
// the next process (or the next minute) would: the database's copy.
func (s *Server) ForgetClients() {
	s.store.clients.mu.Lock()
	s.store.clients.m = nil
	s.store.clients.mu.Unlock()
}
