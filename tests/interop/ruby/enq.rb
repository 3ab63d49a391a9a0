# Runs Sidekiq 6.4's own scheduler (Sidekiq::Scheduled::Enq) once over `retry` and `schedule`:
# every due entry goes back to its queue as Sidekiq's poller pushes it. Prints the queues'
# sizes afterwards.
require 'json'
require 'sidekiq'
require 'sidekiq/scheduled'

Sidekiq::Scheduled::Enq.new.enqueue_jobs
puts JSON.generate(Sidekiq::Queue.all.to_h { |queue| [queue.name, queue.size] })
