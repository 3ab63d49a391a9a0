# Pushes, the way a Ruby app does, a plain job, a scheduled one and a bulk of three to the
# queue ARGV[0] for a wurk worker; prints {"plain": jid, "scheduled": jid, "bulk": [jids]}.
require 'json'
require 'sidekiq'

queue = ARGV.fetch(0)
args = JSON.parse(ARGV.fetch(1)) # the plain and scheduled jobs' arguments
plain = Sidekiq::Client.push('class' => 'Interop::Record', 'queue' => queue, 'args' => args)
scheduled = Sidekiq::Client.push('class' => 'Interop::Record', 'queue' => queue,
                                 'args' => ['scheduled', *args], 'at' => Time.now.to_f + 1)
bulk = Sidekiq::Client.push_bulk('class' => 'Interop::Record', 'queue' => queue,
                                 'args' => [[1], [2], [3]])
puts JSON.generate('plain' => plain, 'scheduled' => scheduled, 'bulk' => bulk)
